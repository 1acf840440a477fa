package node

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"time"

	"github.com/hashicorp/go-hclog"
)

// hclogAdapter lets hashicorp/raft (which wants an hclog.Logger) write
// through the node's *slog.Logger.
//
// Why an adapter rather than hclog.New with the same writer: Deps carries a
// *slog.Logger, not a writer, and its handler decides format (text or JSON),
// level and destination. Forwarding every record to that handler keeps Raft's
// lines in the same stream, format and level filter as the rest of the
// process, with no second configuration to keep in sync.
//
// Levels map as Trace -> slog.LevelDebug-4, Debug, Info, Warn, Error -> the
// slog level of the same name. SetLevel is a no-op: the slog handler owns the
// level. The hclog logger name is emitted as the "logger" attribute.
type hclogAdapter struct {
	base    *slog.Logger // without implied args or name
	l       *slog.Logger // base + implied args + name
	name    string
	implied []any
}

const slogLevelTrace = slog.LevelDebug - 4

func newHCLogger(base *slog.Logger, name string) hclog.Logger {
	return newAdapter(base, name, nil)
}

func newAdapter(base *slog.Logger, name string, implied []any) *hclogAdapter {
	l := base
	if len(implied) > 0 {
		l = l.With(implied...)
	}
	if name != "" {
		l = l.With("logger", name)
	}
	return &hclogAdapter{base: base, l: l, name: name, implied: implied}
}

func toSlogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slogLevelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default: // NoLevel, Info
		return slog.LevelInfo
	}
}

func (h *hclogAdapter) enabled(l slog.Level) bool { return h.l.Enabled(context.Background(), l) }

func (h *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	h.l.Log(context.Background(), toSlogLevel(level), msg, convertArgs(args)...)
}

// convertArgs renders the values hclog formats specially, so text and JSON
// handlers both print them readably: hclog.Fmt values are formatted, and
// fmt.Stringers (such as *raft.Raft, which marshals to {} in JSON) become
// their String(). Errors, times and plain values are left to slog.
func convertArgs(args []any) []any {
	var out []any
	for i := 1; i < len(args); i += 2 {
		v := args[i]
		var s string
		switch x := v.(type) {
		case error, time.Time, slog.Value, slog.LogValuer:
			continue
		case hclog.Format:
			if len(x) == 0 {
				continue
			}
			format, _ := x[0].(string)
			s = fmt.Sprintf(format, x[1:]...)
		case fmt.Stringer:
			s = safeString(x)
		default:
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		out[i] = s
	}
	if out == nil {
		return args
	}
	return out
}

func safeString(s fmt.Stringer) (str string) {
	defer func() {
		if recover() != nil {
			str = "<nil>"
		}
	}()
	return s.String()
}

func (h *hclogAdapter) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hclogAdapter) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hclogAdapter) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hclogAdapter) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hclogAdapter) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hclogAdapter) IsTrace() bool { return h.enabled(slogLevelTrace) }
func (h *hclogAdapter) IsDebug() bool { return h.enabled(slog.LevelDebug) }
func (h *hclogAdapter) IsInfo() bool  { return h.enabled(slog.LevelInfo) }
func (h *hclogAdapter) IsWarn() bool  { return h.enabled(slog.LevelWarn) }
func (h *hclogAdapter) IsError() bool { return h.enabled(slog.LevelError) }

func (h *hclogAdapter) ImpliedArgs() []any { return append([]any(nil), h.implied...) }

func (h *hclogAdapter) With(args ...any) hclog.Logger {
	implied := append(append([]any(nil), h.implied...), args...)
	return newAdapter(h.base, h.name, implied)
}

func (h *hclogAdapter) Name() string { return h.name }

func (h *hclogAdapter) Named(name string) hclog.Logger {
	if h.name != "" {
		name = h.name + "." + name
	}
	return newAdapter(h.base, name, h.implied)
}

func (h *hclogAdapter) ResetNamed(name string) hclog.Logger {
	return newAdapter(h.base, name, h.implied)
}

// SetLevel is a no-op: the slog handler decides what is logged.
func (h *hclogAdapter) SetLevel(hclog.Level) {}

func (h *hclogAdapter) GetLevel() hclog.Level {
	switch {
	case h.IsTrace():
		return hclog.Trace
	case h.IsDebug():
		return hclog.Debug
	case h.IsInfo():
		return hclog.Info
	case h.IsWarn():
		return hclog.Warn
	case h.IsError():
		return hclog.Error
	}
	return hclog.Off
}

func (h *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	level := slog.LevelInfo
	if opts != nil && opts.ForceLevel != hclog.NoLevel {
		level = toSlogLevel(opts.ForceLevel)
	}
	return slog.NewLogLogger(h.l.Handler(), level)
}

func (h *hclogAdapter) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return h.StandardLogger(opts).Writer()
}

var _ hclog.Logger = (*hclogAdapter)(nil)
