// Package slogjournal is a [log/slog] handler that sends each record to
// the systemd journal as one entry with structured fields, through
// go-systemd's journal.Send.
//
// The message becomes MESSAGE, the level PRIORITY (debug 7, info 6, warn
// 4, error 3), and each attribute a field whose name is the attribute's
// key made to fit journald's rules by [FieldName]; attributes inside
// groups are named GROUP_KEY. Values are sent as they are, newlines and
// binary bytes included. Use it when journal.Enabled() reports a journal.
package slogjournal

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/journal"
)

// SendFunc sends one journal entry; journal.Send is one.
type SendFunc func(message string, priority journal.Priority, fields map[string]string) error

// Options configure a [Handler].
type Options struct {
	// Level is the minimum level sent; nil means info.
	Level slog.Leveler
	// Identifier, when set, is sent as SYSLOG_IDENTIFIER.
	Identifier string
	// Send sends an entry; nil means journal.Send.
	Send SendFunc
}

// Handler implements [slog.Handler] over the journal.
type Handler struct {
	opt    Options
	fields []field // from WithAttrs, names complete
	prefix string  // from WithGroup: "GROUP_" …
}

type field struct{ name, value string }

var _ slog.Handler = (*Handler)(nil)

// New returns a handler with opt.
func New(opt Options) *Handler {
	if opt.Level == nil {
		opt.Level = slog.LevelInfo
	}
	if opt.Send == nil {
		opt.Send = journal.Send
	}
	return &Handler{opt: opt}
}

// Enabled implements [slog.Handler].
func (h *Handler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.opt.Level.Level()
}

// Handle implements [slog.Handler]: it sends r as one entry.
func (h *Handler) Handle(_ context.Context, r slog.Record) error {
	fields := make(map[string]string, len(h.fields)+r.NumAttrs()+1)
	for _, f := range h.fields {
		put(fields, f.name, f.value)
	}
	r.Attrs(func(a slog.Attr) bool {
		flatten(fields, h.prefix, a)
		return true
	})
	if h.opt.Identifier != "" {
		fields["SYSLOG_IDENTIFIER"] = h.opt.Identifier
	}
	return h.opt.Send(r.Message, Priority(r.Level), fields)
}

// WithAttrs implements [slog.Handler].
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	m := map[string]string{}
	for _, a := range as {
		flatten(m, h.prefix, a)
	}
	h2 := *h
	h2.fields = slices.Clone(h.fields)
	for name, v := range m {
		h2.fields = append(h2.fields, field{name, v})
	}
	return &h2
}

// WithGroup implements [slog.Handler].
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	h2 := *h
	h2.prefix = h.prefix + name + "_"
	return &h2
}

// Priority maps a slog level to a journal priority: below info is debug,
// below warn info, below error warning, and error or above err.
func Priority(l slog.Level) journal.Priority {
	switch {
	case l < slog.LevelInfo:
		return journal.PriDebug
	case l < slog.LevelWarn:
		return journal.PriInfo
	case l < slog.LevelError:
		return journal.PriWarning
	}
	return journal.PriErr
}

// flatten adds a (resolved; groups flattened under prefix) to m.
func flatten(m map[string]string, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "_"
		}
		for _, g := range v.Group() {
			flatten(m, p, g)
		}
		return
	}
	if a.Equal(slog.Attr{}) {
		return
	}
	var s string
	switch v.Kind() {
	case slog.KindTime:
		s = v.Time().Format(time.RFC3339Nano)
	default:
		s = v.String()
	}
	put(m, FieldName(prefix+a.Key), s)
}

// reserved are the fields the handler sets itself; attributes by these
// names are sent as ATTR_NAME instead of overriding them.
var reserved = []string{"MESSAGE", "PRIORITY", "SYSLOG_IDENTIFIER"}

func put(m map[string]string, name, value string) {
	if slices.Contains(reserved, name) {
		name = "ATTR_" + name
	}
	m[name] = value
}

// FieldName makes key a valid journal field name: letters are
// upper-cased, every other byte that is not A-Z, 0-9 or _ becomes _,
// leading underscores (reserved for journald's trusted fields) are
// dropped, a name that would start with a digit gets an F prefix, an
// empty one is F, and the result is cut to 64 bytes.
func FieldName(key string) string {
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case 'a' <= c && c <= 'z':
			b.WriteByte(c - 'a' + 'A')
		case 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_':
			b.WriteByte(c)
		default:
			b.WriteByte('_')
		}
	}
	s := strings.TrimLeft(b.String(), "_")
	if s == "" || ('0' <= s[0] && s[0] <= '9') {
		s = "F" + s
	}
	if len(s) > 64 {
		s = s[:64]
	}
	return s
}
