// Command etcd is the etcd server used by the test cluster, built from the
// same Go module version that kube-apiserver v1.37 depends on.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
