// Command flood sends n requests at once to rootgated, each of whose runs
// writes size bytes to stderr, and reads each answer at rate bytes a
// second; it prints how many were answered ok.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

func main() {
	sock := flag.String("socket", "/run/rootgate/rootgate.sock", "socket")
	n := flag.Int("n", 32, "requests at once")
	size := flag.Int("size", 16<<20, "stderr bytes per run")
	rate := flag.Int("rate", 1<<20, "bytes read per second per connection")
	flag.Parse()
	var ok, bad atomic.Int64
	var wg sync.WaitGroup
	for i := range *n {
		wg.Go(func() {
			c, err := net.Dial("unix", *sock)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				bad.Add(1)
				return
			}
			defer c.Close()
			req := map[string]any{"id": fmt.Sprintf("flood-%d-%s", i, uuid.NewString()), "time": time.Now().UTC().Format(time.RFC3339Nano),
				"pipeline": [][]string{{"sh", "-c", fmt.Sprintf("head -c %d /dev/zero >&2", *size)}}, "privileged": true, "reason": "memory flood", "host": "vm", "session": "flood"}
			b, _ := json.Marshal(req)
			if _, err := c.Write(append(b, '\n')); err != nil {
				bad.Add(1)
				return
			}
			r := bufio.NewReaderSize(c, 64<<10)
			buf := make([]byte, 64<<10)
			var head []byte
			var total int
			start := time.Now()
			for {
				m, err := r.Read(buf[:min(len(buf), *rate/10+1)])
				if len(head) < 300 {
					head = append(head, buf[:min(m, 300)]...)
				}
				total += m
				if err != nil {
					break
				}
				if want := time.Duration(float64(total) / float64(*rate) * float64(time.Second)); time.Since(start) < want {
					time.Sleep(want - time.Since(start))
				}
			}
			if strings.Contains(string(head), `"status":"ok"`) {
				ok.Add(1)
			} else {
				fmt.Fprintf(os.Stderr, "request %d: %d bytes: %.200s\n", i, total, head)
				bad.Add(1)
			}
		})
	}
	wg.Wait()
	fmt.Printf("flood: %d ok, %d not\n", ok.Load(), bad.Load())
}
