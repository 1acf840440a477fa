package fsm

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"time"
	"unicode/utf8"

	"github.com/metastore/metastore/wire"
)

// Access tokens and the object-URL signing key, replicated like the rest
// of the state so every member authenticates the same way.
//
// A token is never stored: the state keeps the SHA-256 of its secret. The
// secret is 32 bytes from crypto/rand (256 bits of entropy), so guessing it
// from its hash is as hard as guessing it outright; a slow, salted password
// hash (bcrypt, argon2) buys nothing for such a secret and would cost every
// request a deliberately slow computation.

var (
	authTokenPrefix = []byte("token\x00")
	authHashPrefix  = []byte("hash\x00")
	authURLKey      = []byte("url_key")
)

// tokenRecord is a token's record. It never holds the secret.
type tokenRecord struct {
	// Accessor names the token in lists and revocations; it is not a
	// credential.
	Accessor string    `json:"accessor"`
	Role     wire.Role `json:"role"`
	// Job or JobPrefix is the scope of a worker token (exactly one is set).
	Job         string `json:"job,omitempty"`
	JobPrefix   string `json:"job_prefix,omitempty"`
	Description string `json:"description,omitempty"`
	// Hash is the hex SHA-256 of the secret (wire.TokenHash).
	Hash string `json:"hash"`
	// CreatedAt is the leader's clock when the token was created.
	CreatedAt   time.Time `json:"created_at"`
	CreateIndex uint64    `json:"create_index"`
}

var (
	accessorPattern  = regexp.MustCompile(`^[0-9a-f]{16}$`)
	hashPattern      = regexp.MustCompile(`^[0-9a-f]{64}$`)
	jobPrefixPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
)

// NewAccessor returns a random accessor of the form TokenCreate requires
// (16 lowercase hex digits), for the proposer to choose. (Never called in
// Apply: the accessor travels in the command.)
func NewAccessor() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// TokenCreate creates a token. The proposer chooses the accessor and hashes
// the secret; the secret never enters the log.
type TokenCreate struct {
	Accessor    string    `json:"accessor"`
	Hash        string    `json:"hash"`
	Role        wire.Role `json:"role"`
	Job         string    `json:"job,omitempty"`
	JobPrefix   string    `json:"job_prefix,omitempty"`
	Description string    `json:"description,omitempty"`
	// Bootstrap creates the token only when no token exists yet; otherwise
	// the command changes nothing and answers Created false.
	Bootstrap bool `json:"bootstrap,omitempty"`
}

// Validate checks the request on its own terms.
func (p *TokenCreate) Validate() error {
	if !accessorPattern.MatchString(p.Accessor) {
		return ruleErr(wire.CodeInvalid, "accessor", "%q is not 16 lowercase hex digits", p.Accessor)
	}
	if !hashPattern.MatchString(p.Hash) {
		return ruleErr(wire.CodeInvalid, "hash", "not a hex SHA-256")
	}
	switch p.Role {
	case wire.RoleOperator:
		if p.Job != "" || p.JobPrefix != "" {
			return ruleErr(wire.CodeInvalid, "job", "an operator token covers every job; it takes no job or job_prefix")
		}
	case wire.RoleWorker:
		if (p.Job == "") == (p.JobPrefix == "") {
			return ruleErr(wire.CodeInvalid, "job", "a worker token needs exactly one of job or job_prefix")
		}
		if p.Job != "" {
			if err := wire.CheckID("job", p.Job); err != nil {
				return err
			}
		}
		if p.JobPrefix != "" && !jobPrefixPattern.MatchString(p.JobPrefix) {
			return ruleErr(wire.CodeInvalid, "job_prefix", "%q must match %s", p.JobPrefix, jobPrefixPattern)
		}
	default:
		return ruleErr(wire.CodeInvalid, "role", "%q is not operator or worker", p.Role)
	}
	if len(p.Description) > wire.MaxReasonLen || !utf8.ValidString(p.Description) {
		return ruleErr(wire.CodeInvalid, "description", "at most %d bytes of UTF-8", wire.MaxReasonLen)
	}
	return nil
}

// TokenCreated is the value of a token-create command.
type TokenCreated struct {
	// Created is false when a bootstrap found tokens already there.
	Created bool        `json:"created"`
	Token   *wire.Token `json:"token,omitempty"`
}

func (p *TokenCreate) same(t *tokenRecord) bool {
	return t.Hash == p.Hash && t.Role == p.Role && t.Job == p.Job && t.JobPrefix == p.JobPrefix && t.Description == p.Description
}

func applyTokenCreate(t *txn, c Command, p *TokenCreate) (any, error) {
	if p.Bootstrap {
		exists := false
		if err := t.scan(bucketAuth, authTokenPrefix, func(_, _ []byte) (bool, error) {
			exists = true
			return false, nil
		}); err != nil {
			return nil, err
		}
		if exists {
			return &TokenCreated{Created: false}, nil
		}
	}
	if old, err := t.token(p.Accessor); err != nil {
		return nil, err
	} else if old != nil {
		if p.same(old) {
			return &TokenCreated{Created: true, Token: wireToken(old)}, nil // a repeat of the same create
		}
		return nil, ruleErr(wire.CodeConflict, "accessor", "a token with accessor %s exists", p.Accessor)
	}
	if t.b(bucketAuth).Get(append(authHashPrefix, p.Hash...)) != nil {
		return nil, ruleErr(wire.CodeConflict, "hash", "a token with this secret exists")
	}
	tok := &tokenRecord{
		Accessor: p.Accessor, Role: p.Role, Job: p.Job, JobPrefix: p.JobPrefix, Description: p.Description,
		Hash: p.Hash, CreatedAt: c.Time, CreateIndex: t.index,
	}
	if err := t.putRecord(bucketAuth, append(authTokenPrefix, p.Accessor...), tok); err != nil {
		return nil, err
	}
	if err := t.b(bucketAuth).Put(append(authHashPrefix, p.Hash...), []byte(p.Accessor)); err != nil {
		return nil, err
	}
	return &TokenCreated{Created: true, Token: wireToken(tok)}, nil
}

// TokenRevoke revokes a token. Revoking the last operator token is refused
// unless Force: nobody could manage the cluster's tokens any more (until a
// restart with a bootstrap token file).
type TokenRevoke struct {
	Accessor string `json:"accessor"`
	Force    bool   `json:"force,omitempty"`
}

func (p *TokenRevoke) Validate() error {
	if !accessorPattern.MatchString(p.Accessor) {
		return ruleErr(wire.CodeInvalid, "accessor", "%q is not 16 lowercase hex digits", p.Accessor)
	}
	return nil
}

func applyTokenRevoke(t *txn, c Command, p *TokenRevoke) (any, error) {
	tok, err := t.token(p.Accessor)
	if err != nil {
		return nil, err
	}
	if tok == nil {
		return nil, ruleErr(wire.CodeNotFound, "accessor", "no token with accessor %s", p.Accessor)
	}
	if tok.Role == wire.RoleOperator && !p.Force {
		others := 0
		err := t.scan(bucketAuth, authTokenPrefix, func(k, v []byte) (bool, error) {
			var o tokenRecord
			if err := decodeRecord(v, &o); err != nil {
				return false, fmt.Errorf("fsm: decode %s/%q: %w", bucketAuth, k, err)
			}
			if o.Role == wire.RoleOperator && o.Accessor != tok.Accessor {
				others++
			}
			return others == 0, nil
		})
		if err != nil {
			return nil, err
		}
		if others == 0 {
			return nil, ruleErr(wire.CodeConflict, "accessor", "token %s is the last operator token: revoking it would leave nobody able to manage tokens; create another operator token first, or force the revocation", p.Accessor)
		}
	}
	if err := t.del(bucketAuth, append(authTokenPrefix, tok.Accessor...)); err != nil {
		return nil, err
	}
	if err := t.del(bucketAuth, append(authHashPrefix, tok.Hash...)); err != nil {
		return nil, err
	}
	return tok, nil
}

// URLKeyInit sets the key that signs object URLs, unless one is set: the
// first proposal wins and later ones change nothing.
type URLKeyInit struct {
	Key []byte `json:"key"`
}

// URLKeyLen is the length of the object-URL signing key.
const URLKeyLen = 32

func (p *URLKeyInit) Validate() error {
	if len(p.Key) != URLKeyLen {
		return ruleErr(wire.CodeInvalid, "key", "the signing key is %d bytes, not %d", len(p.Key), URLKeyLen)
	}
	return nil
}

func applyURLKeyInit(t *txn, c Command, p *URLKeyInit) (any, error) {
	b := t.b(bucketAuth)
	if b.Get(authURLKey) != nil {
		return false, nil
	}
	return true, b.Put(authURLKey, p.Key)
}

func (t *txn) token(accessor string) (*tokenRecord, error) {
	var tok tokenRecord
	ok, err := t.getRecord(bucketAuth, append(authTokenPrefix, accessor...), &tok)
	if err != nil || !ok {
		return nil, err
	}
	return &tok, nil
}

// TokenByHash finds the token whose secret hashes to hash (wire.TokenHash);
// nil when there is none. It reads every applied entry (a revocation
// applied here counts at once) without committing the open transaction
// (viewLatest): it runs for every authenticated request, and a commit for
// each would undo the state file's group commits.
func (f *FSM) TokenByHash(hash string) (*wire.Token, error) {
	var out *wire.Token
	_, err := f.viewLatest(func(t *txn) error {
		acc := t.b(bucketAuth).Get(append(authHashPrefix, hash...))
		if acc == nil {
			return nil
		}
		tok, err := t.token(string(acc))
		out = wireToken(tok)
		return err
	})
	return out, err
}

// Tokens lists every token, by accessor.
func (f *FSM) Tokens() ([]wire.Token, uint64, error) {
	out := []wire.Token{}
	idx, err := f.view(func(t *txn) error {
		return t.scan(bucketAuth, authTokenPrefix, func(k, _ []byte) (bool, error) {
			var tok tokenRecord
			if _, err := t.getRecord(bucketAuth, k, &tok); err != nil {
				return false, err
			}
			out = append(out, *wireToken(&tok))
			return true, nil
		})
	})
	return out, idx, err
}

// URLKey is the object-URL signing key; nil until URLKeyInit set it. It
// commits nothing (viewLatest), as TokenByHash.
func (f *FSM) URLKey() ([]byte, error) {
	var out []byte
	_, err := f.viewLatest(func(t *txn) error {
		if k := t.b(bucketAuth).Get(authURLKey); k != nil {
			out = append([]byte(nil), k...)
		}
		return nil
	})
	return out, err
}
