package api

import (
	"bytes"
	"unicode/utf8"
)

// shapeOK scans the first JSON value of raw and reports true only when it
// is well formed (RFC 8259), nested at most maxJSONDepth deep, and has no
// key twice in one object. It allocates nothing and never words an error:
// false means "walk it with walkJSONShape", which finds and names the
// problem, or passes the value when the scanner only declined it (an
// escaped key, whose comparison needs unescaping, or an object with more
// than maxScannedKeys keys, whose pairwise comparison would be slow).
//
// What the scanner passes must be what walkJSONShape passes:
// FuzzCheckJSONShape compares the two on arbitrary bodies.
func shapeOK(raw []byte) bool {
	s := shapeScanner{raw: raw}
	s.ws()
	return s.value(0)
}

// maxScannedKeys bounds the keys of one object the scanner compares
// pairwise; a wider object is left to walkJSONShape.
const maxScannedKeys = 64

type shapeScanner struct {
	raw []byte
	i   int
	// keys[:n] are the keys of the objects being read, innermost last (as
	// offsets into raw): an object's keys are keys[start:n] while it is the
	// innermost, and are dropped when it closes. A body with more open
	// keys than fit is left to the walk.
	keys [256]span
	n    int
}

type span struct{ from, to int }

func (s *shapeScanner) ws() {
	for s.i < len(s.raw) {
		switch s.raw[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value reads one value; depth is the containers around it.
func (s *shapeScanner) value(depth int) bool {
	if s.i >= len(s.raw) {
		return false
	}
	switch c := s.raw[s.i]; {
	case c == '{':
		return depth < maxJSONDepth && s.object(depth+1)
	case c == '[':
		return depth < maxJSONDepth && s.array(depth+1)
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '-' || ('0' <= c && c <= '9'):
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return false
}

func (s *shapeScanner) literal(lit string) bool {
	if !bytes.HasPrefix(s.raw[s.i:], []byte(lit)) {
		return false
	}
	s.i += len(lit)
	return true
}

// str reads a string and returns its raw content (between the quotes) and
// whether it holds no escape.
func (s *shapeScanner) str() (content []byte, ok bool) {
	start := s.i + 1
	plain := true
	for i := start; i < len(s.raw); i++ {
		switch c := s.raw[i]; {
		case c == '"':
			s.i = i + 1
			if !plain {
				return nil, true
			}
			return s.raw[start:i], true
		case c < 0x20:
			return nil, false
		case c == '\\':
			plain = false
			i++
			if i >= len(s.raw) {
				return nil, false
			}
			switch s.raw[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(s.raw) {
					return nil, false
				}
				for _, h := range s.raw[i+1 : i+5] {
					if !isHex(h) {
						return nil, false
					}
				}
				i += 4
			default:
				return nil, false
			}
		}
	}
	return nil, false
}

func isHex(c byte) bool {
	return ('0' <= c && c <= '9') || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F')
}

func (s *shapeScanner) digits() bool {
	start := s.i
	for s.i < len(s.raw) && '0' <= s.raw[s.i] && s.raw[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

func (s *shapeScanner) number() bool {
	if s.raw[s.i] == '-' {
		s.i++
	}
	if s.i < len(s.raw) && s.raw[s.i] == '0' {
		s.i++
	} else if !s.digits() {
		return false
	}
	if s.i < len(s.raw) && s.raw[s.i] == '.' {
		s.i++
		if !s.digits() {
			return false
		}
	}
	if s.i < len(s.raw) && (s.raw[s.i] == 'e' || s.raw[s.i] == 'E') {
		s.i++
		if s.i < len(s.raw) && (s.raw[s.i] == '+' || s.raw[s.i] == '-') {
			s.i++
		}
		if !s.digits() {
			return false
		}
	}
	// A number must end at a delimiter: "1x" or "01" is not one value.
	if s.i < len(s.raw) {
		switch s.raw[s.i] {
		case ' ', '\t', '\n', '\r', ',', ']', '}':
		default:
			return false
		}
	}
	return true
}

func (s *shapeScanner) array(depth int) bool {
	s.i++ // [
	s.ws()
	if s.i < len(s.raw) && s.raw[s.i] == ']' {
		s.i++
		return true
	}
	for {
		if !s.value(depth) {
			return false
		}
		if closed, ok := s.after(']'); !ok || closed {
			return ok
		}
	}
}

// after reads what follows a member of a container: a comma (another
// member follows) or the container's closing byte. closed reports the
// latter; ok is false for anything else.
func (s *shapeScanner) after(closing byte) (closed, ok bool) {
	s.ws()
	if s.i >= len(s.raw) {
		return false, false
	}
	switch s.raw[s.i] {
	case ',':
		s.i++
		s.ws()
		return false, true
	case closing:
		s.i++
		return true, true
	}
	return false, false
}

func (s *shapeScanner) object(depth int) bool {
	start := s.n
	defer func() { s.n = start }()
	s.i++ // {
	s.ws()
	if s.i < len(s.raw) && s.raw[s.i] == '}' {
		s.i++
		return true
	}
	for {
		if s.i >= len(s.raw) || s.raw[s.i] != '"' {
			return false
		}
		from := s.i + 1
		key, ok := s.str()
		if !ok || key == nil || s.n-start >= maxScannedKeys || s.n == len(s.keys) {
			return false // malformed, escaped, or too many keys to compare
		}
		if !utf8.Valid(key) {
			// encoding/json reads each bad byte as U+FFFD, so two
			// different keys could be one key to it.
			return false
		}
		for _, k := range s.keys[start:s.n] {
			if bytes.Equal(s.raw[k.from:k.to], key) {
				return false
			}
		}
		s.keys[s.n] = span{from, from + len(key)}
		s.n++
		s.ws()
		if s.i >= len(s.raw) || s.raw[s.i] != ':' {
			return false
		}
		s.i++
		s.ws()
		if !s.value(depth) {
			return false
		}
		if closed, ok := s.after('}'); !ok || closed {
			return ok
		}
	}
}
