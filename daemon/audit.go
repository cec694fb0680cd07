package daemon

import (
	"github.com/rootgate/rootgate/approval"
	"github.com/rootgate/rootgate/pipeline"
	"github.com/rootgate/rootgate/wire"
)

// EventKind names a step of a request's life.
type EventKind string

// The lifecycle events, in the order a request meets them.
const (
	EventReceived EventKind = "received" // decoded and valid in form
	EventRejected EventKind = "rejected" // refused by a check; Err says why
	EventDecided  EventKind = "decided"  // Decision says by whom
	EventStarted  EventKind = "started"  // Plan holds what runs
	EventFinished EventKind = "finished" // Result holds the outcome, or Err
)

// Event is one step of a request's life, for an [AuditSink]. Only the
// fields of its kind are set.
type Event struct {
	Kind     EventKind
	ID       string
	Peer     Peer
	Request  *wire.Request
	Err      error
	Decision *approval.Decision
	Plan     *runPlan
	Result   *pipeline.Result
}

// An AuditSink records request lifecycle events. Record must be safe for
// concurrent use; an error from it for EventStarted stops the run.
type AuditSink interface {
	Record(Event) error
}

// event hands e to the audit sink, if any, and returns its error (logged
// here; only EventStarted acts on it).
func (s *Server) event(e Event) error {
	if s.cfg.Audit == nil {
		return nil
	}
	err := s.cfg.Audit.Record(e)
	if err != nil {
		s.cfg.Log.Error("audit", "kind", e.Kind, "id", e.ID, "err", err)
	}
	return err
}
