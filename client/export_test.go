package client

// QueuedAcks is the number of acks waiting for a request slot (acks.go).
func QueuedAcks(c *Client) int {
	c.acks.mu.Lock()
	defer c.acks.mu.Unlock()
	return len(c.acks.queue)
}
