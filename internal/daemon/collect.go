package daemon

import (
	"runtime"

	"github.com/rootgate/rootgate/wire"
)

// collectAfter is how many bytes of captured output a run's answer
// held at least for the daemon to collect garbage once the request is
// over, whether the answer was sent or its requester had left. What a run
// holds is its stages' stderr (up to 16 MiB, one cap they share): its
// stdout went into the answer as it came (answerLine) and leaves only a
// stream's buffers, not worth a collection. Once answered the stderr is
// garbage, but the collector's pacing would free it only when the heap has
// grown by as much again, so the next big run would first take new memory
// beside it, and the daemon's peak would be two runs' stderr instead of
// one (docs/performance.md, "Daemon peak RSS"). Collecting then frees it
// for the next run to reuse. The buffers hold no pointers, so a
// collection costs little next to capturing this much.
const collectAfter = 4 << 20

// collectAfterRun collects garbage when a run's answer carried out bytes
// of output, at least collectAfter. The caller has nothing of the run's
// output left referenced: its answer is written (or its requester gone).
// It is called at once then, before the connection's other tail work:
// the client may already be sending its next request.
func collectAfterRun(out int) {
	if out >= collectAfter {
		runtime.GC()
	}
}

// outputLen is how many bytes of output resp held in the daemon's
// memory: a run's answer holds its stderr captures as chunks
// (runResponse), and its stdout as chunks only when it was not streamed
// (none, since every run's stdout is).
func outputLen(resp *wire.Response) int {
	if resp == nil {
		return 0
	}
	n := 0
	for _, c := range resp.StdoutChunks {
		n += len(c)
	}
	for _, s := range resp.Stages {
		for _, c := range s.StderrChunks {
			n += len(c)
		}
	}
	return n
}
