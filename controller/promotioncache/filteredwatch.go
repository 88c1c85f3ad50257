package promotioncache

import (
	"sync"

	"k8s.io/apimachinery/pkg/watch"
)

// filteredWatch is watch.Filter that stops sending once stopped: the
// reflector stops reading when it stops the watch, and watch.Filter's
// goroutine would then block on its send for ever.
type filteredWatch struct {
	source watch.Interface
	filter func(watch.Event) (watch.Event, bool)
	result chan watch.Event
	done   chan struct{}
	stop   sync.Once
}

func newFilteredWatch(source watch.Interface, filter func(watch.Event) (watch.Event, bool)) *filteredWatch {
	w := &filteredWatch{source: source, filter: filter, result: make(chan watch.Event), done: make(chan struct{})}
	go w.loop()
	return w
}

func (w *filteredWatch) ResultChan() <-chan watch.Event { return w.result }

func (w *filteredWatch) Stop() {
	w.stop.Do(func() {
		close(w.done)
		w.source.Stop()
	})
}

func (w *filteredWatch) loop() {
	defer close(w.result)
	for e := range w.source.ResultChan() {
		e, keep := w.filter(e)
		if !keep {
			continue
		}
		select {
		case w.result <- e:
		case <-w.done:
			return
		}
	}
}
