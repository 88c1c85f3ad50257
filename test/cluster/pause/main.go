// Command pause is the node's Pod sandbox image (test/cluster/node.go): it
// holds a Pod's namespaces and does nothing else until it is told to stop.
// registry.k8s.io's pause image is out of reach of the tests, so the node
// builds this one, static, into a one-file image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
