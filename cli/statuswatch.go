package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/term"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// ageRefresh is how often a terminal's screen is redrawn with nothing new,
// so that its SINCE and LATCHED ages stay true.
const ageRefresh = 5 * time.Second

// clearScreen moves the cursor home and clears the screen (ANSI).
const clearScreen = "\x1b[H\x1b[2J"

// watchStatus is status -w: it watches the Stages and the StagePauses and
// shows them again on every change, until ctx ends.
func (o *statusOptions) watchStatus(ctx context.Context, client dynamic.Interface, ns string, only []string, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changed := make(chan struct{}, 1)
	var selectStage func(*metav1.ListOptions)
	if len(only) == 1 {
		selectStage = byName(only[0])
	}
	stages, err := watchSource(ctx, sourceSpec{client: client, gvr: kargo.StagesResource, ns: ns, tweak: selectStage, changed: changed})
	if err != nil {
		return stopped(ctx, err)
	}
	if len(only) == 1 && len(stages.objects()) == 0 {
		return fmt.Errorf("no such Stage %s in project %s", only[0], ns)
	}
	pauses, err := watchSource(ctx, sourceSpec{client: client, gvr: v1alpha1.StagePausesResource, ns: ns, changed: changed})
	if err != nil {
		return stopped(ctx, err)
	}
	screen := &redrawer{out: out, output: o.output, withProject: o.all, tty: isTerminal(out)}
	var refresh <-chan time.Time
	if screen.tty {
		t := time.NewTicker(ageRefresh)
		defer t.Stop()
		refresh = t.C
	}
	for {
		if err := screen.draw(rows(stages.objects(), pausesOf(pauses.objects())), time.Now()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil // interrupted: the normal end of a watch
		case <-changed:
		case <-refresh:
			screen.stale = true
		}
	}
}

// stopped is err, unless ctx ended first: then the watch was only
// interrupted while it started.
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// redrawer shows successive states of the rows: on a terminal it clears the
// screen and draws them anew; elsewhere it appends them, and only when they
// changed (a pipe or a CI log keeps every state, once).
type redrawer struct {
	out         io.Writer
	output      string
	withProject bool
	tty         bool
	// last is the last state drawn, as JSON (absolute times, no ages).
	last []byte
	// stale is set when a terminal's ages need a redraw though nothing
	// changed.
	stale bool
}

func (r *redrawer) draw(rows []StageStatus, now time.Time) error {
	state, err := json.Marshal(rows)
	if err != nil {
		return err
	}
	if r.last != nil && bytes.Equal(state, r.last) && !r.stale {
		return nil
	}
	first := r.last == nil
	r.last, r.stale = state, false
	var b bytes.Buffer
	switch {
	case r.tty:
		b.WriteString(clearScreen)
	case first:
	case r.output == "yaml":
		b.WriteString("---\n")
	case r.output == "table", r.output == "wide":
		b.WriteString("\n")
	}
	if err := render(&b, rows, r.output, r.withProject, now); err != nil {
		return err
	}
	_, err = r.out.Write(b.Bytes())
	return err
}

// isTerminal reports whether out is a terminal, which status -w redraws.
func isTerminal(out io.Writer) bool {
	f, ok := out.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
