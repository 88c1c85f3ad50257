package cluster

import (
	"context"
	"os"
	"testing"
)

func TestZZRuntimeSmoke(t *testing.T) {
	if os.Getenv("ZZ") == "" {
		t.Skip()
	}
	root, _ := RepoRoot()
	dir, _ := os.MkdirTemp("", "kargo-latch-node-")
	n := &Node{Dir: dir, cluster: &Cluster{Root: root}, netnsBefore: netnsNames()}
	defer n.Stop()
	if err := createBridge(); err != nil {
		t.Fatal(err)
	}
	if err := n.startContainerd(context.Background(), t.Logf); err != nil {
		t.Fatal(err)
	}
	var out = &stringsBuilder{}
	_ = n.ctr(context.Background(), out, "-n", "k8s.io", "images", "ls")
	t.Log(out.s)
}

type stringsBuilder struct{ s string }

func (b *stringsBuilder) Write(p []byte) (int, error) { b.s += string(p); return len(p), nil }
