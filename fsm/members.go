package fsm

import (
	"errors"
	"slices"
	"strings"
)

// The member records (id, Raft and HTTP address of each member) are few,
// and they are read on paths that must answer while the state machine is
// busy: GET /v1/status and /v1/members (Node.Status), the Host check of
// every request, the leader's HTTP address that requests are forwarded to.
// So they are kept in memory, as of the last applied entry, and published
// atomically: Members takes no lock and reads no file. It answers while a
// restore holds the file exclusively (mu), while a batch or a commit holds
// the write transaction (txMu), and while bbolt remaps the file; a read of
// the file would wait for all of them, and with it the status of a member
// that installs a snapshot, which is when an operator asks for it.
//
// The list is read from the members bucket when the file is opened, when a
// restore has swapped the file in (before the readers' lock is released),
// and after a batch that applied a member command, inside the open write
// transaction: it shows what the batch applied before it is committed, as
// reads of the file do (view commits first). A commit that fails applies
// the same entries again, which gives the same list. An open transaction
// discarded at shutdown or before a panic (discardLocked) leaves the list
// ahead of the file; the member is stopping, and Raft applies those
// entries again at restart.

// memberList is one published list of the member records (as Members
// shows them), or the error reading them met (a record that does not
// decode).
type memberList struct {
	members []Member
	err     error
}

var errClosed = errors.New("fsm: closed")

// Members lists the member records as of the last applied entry, ordered
// by id. It never waits: see above.
func (f *FSM) Members() ([]Member, error) {
	l := f.members.Load()
	if l == nil {
		return nil, errClosed
	}
	if l.err != nil {
		return nil, l.err
	}
	return slices.Clone(l.members), nil
}

// publishMembers reads the member records in t and publishes them for
// Members.
func (f *FSM) publishMembers(t *txn) {
	var l memberList
	l.err = t.scan(bucketMembers, nil, func(_, v []byte) (bool, error) {
		var m memberRecord
		if err := decodeRecord(v, &m); err != nil {
			return false, err
		}
		l.members = append(l.members, wireMember(&m))
		return true, nil
	})
	if l.err != nil {
		l.members = nil
	}
	f.members.Store(&l)
}

// memberChanged notes that a command wrote or removed the member record
// of id.
func (t *txn) memberChanged(id string) { t.members = append(t.members, id) }

// updateMembers publishes the list with the records of ids as t holds
// them (written or removed), from the list published last: a batch costs
// its member commands, not the members. A list that could not be read is
// read again whole.
func (f *FSM) updateMembers(t *txn, ids []string) {
	prev := f.members.Load()
	if prev == nil || prev.err != nil {
		f.publishMembers(t)
		return
	}
	byID := make(map[string]Member, len(prev.members)+len(ids))
	for _, m := range prev.members {
		byID[m.ID] = m
	}
	for _, id := range ids {
		var m memberRecord
		ok, err := t.getRecord(bucketMembers, []byte(id), &m)
		switch {
		case err != nil:
			f.members.Store(&memberList{err: err})
			return
		case ok:
			byID[id] = wireMember(&m)
		default:
			delete(byID, id)
		}
	}
	l := memberList{members: make([]Member, 0, len(byID))}
	for _, m := range byID {
		l.members = append(l.members, m)
	}
	slices.SortFunc(l.members, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	f.members.Store(&l)
}
