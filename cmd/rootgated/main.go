// Command rootgated is rootgate's root daemon: it takes requests on a Unix
// socket, asks for approval, and runs the approved pipelines.
package main

import (
	"os"

	"github.com/rootgate/rootgate/cmd/internal/daemoncmd"
)

func main() { os.Exit(daemoncmd.Main(os.Args[1:])) }
