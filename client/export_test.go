package client

import "time"

// QueuedAcks is the number of acks waiting for a request slot (acks.go).
func QueuedAcks(c *Client) int {
	c.acks.mu.Lock()
	defer c.acks.mu.Unlock()
	return len(c.acks.queue)
}

// EndAlone ends the time acks go alone after a member had no batch route.
func EndAlone(c *Client) {
	c.acks.mu.Lock()
	defer c.acks.mu.Unlock()
	c.acks.aloneUntil = time.Now().Add(-time.Second)
}
