package windows

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// Compiled is a window checked and ready to expand. One value serves every
// Stage, from any goroutine: only the exported fields may be changed, by
// the caller, before it shares the value.
type Compiled struct {
	// Name names the window in Interval.Windows and Reason.Windows. It
	// starts as the window's name; a caller that merges ProjectConfig and
	// ClusterConfig windows, whose names may repeat, may qualify it.
	Name string
	// Kind is Allow or Deny.
	Kind Kind
	// ClusterWide is true for a ClusterConfig window, whose projectSelector
	// applies; a ProjectConfig window applies to its own Project's Stages.
	ClusterWide bool
	// Window is the window as written.
	Window Window

	start    dateTime
	end      time.Time // the instant of dtend
	duration time.Duration
	rule     *recurrence // nil for a single interval
	stages   matcher
	projects matcher
	last     memo // the last expansion, which the next Stage likely shares
}

// Compile checks and compiles a ProjectConfig window. Its error, when not
// nil, joins one *WindowError per problem found (see WindowErrors), each
// naming the window and the field, for a Warning Event.
//
// Beyond parsing, it refuses what Kargo's documentation leaves open but
// would hurt if guessed: a window without dtstart; a window without dtend
// (with an rrule there would be no duration; an Allow window with none
// would close its Stages for ever); dtend not after dtstart; a rule that
// never occurs; and a projectSelector, which Kargo rejects on a
// ProjectConfig window.
func Compile(w Window) (*Compiled, error) { return compile(w, false) }

// CompileClusterWide checks and compiles a ClusterConfig window, whose
// projectSelector selects the Projects it applies to.
func CompileClusterWide(w Window) (*Compiled, error) { return compile(w, true) }

func compile(w Window, clusterWide bool) (*Compiled, error) {
	c := &Compiled{Name: w.Name, Kind: w.Kind, ClusterWide: clusterWide, Window: w}
	var errs []*WindowError
	fail := func(field string, err error) { errs = append(errs, &WindowError{Field: field, Err: err}) }

	if w.Name == "" {
		fail("name", errors.New("required"))
	}
	switch w.Kind {
	case KindAllow, KindDeny:
	case "":
		fail("kind", errors.New(`required: "Allow" or "Deny"`))
	default:
		fail("kind", fmt.Errorf(`%q is neither "Allow" nor "Deny"`, w.Kind))
	}

	var startOK, endOK bool
	if w.DTStart == "" {
		fail("dtstart", errors.New("required: occurrences count from it"))
	} else if start, err := parseDateTime(w.DTStart); err != nil {
		fail("dtstart", err)
	} else {
		c.start, startOK = start, true
	}
	switch {
	case w.DTEnd != "":
		if end, err := parseDateTime(w.DTEnd); err != nil {
			fail("dtend", err)
		} else {
			c.end, endOK = end.at(), true
		}
	case w.RRule == "":
		fail("dtend", errors.New("a window with neither rrule nor dtend never ends"))
	default:
		fail("dtend", errors.New("required: with an rrule, each occurrence lasts dtend - dtstart"))
	}
	if startOK && endOK {
		c.duration = c.end.Sub(c.start.at())
		switch {
		case c.duration <= 0:
			loc := c.start.loc
			fail("dtend", fmt.Errorf("%s is not after dtstart %s", c.end.In(loc).Format(time.RFC3339), c.start.at().In(loc).Format(time.RFC3339)))
		case !c.start.at().Add(c.duration).Equal(c.end):
			fail("dtend", errors.New("too far after dtstart (more than 290 years)"))
		}
	}
	if w.RRule != "" && startOK {
		rule, err := parseRRule(w.RRule, c.start)
		if err != nil {
			fail("rrule", err)
		} else {
			c.rule = rule
		}
	}

	var selErrs []*WindowError
	c.stages, selErrs = compileSelector("stageSelector", w.StageSelector)
	errs = append(errs, selErrs...)
	if w.ProjectSelector != nil && !clusterWide {
		fail("projectSelector", errors.New("only ClusterConfig windows select Projects; Kargo rejects it on a ProjectConfig window"))
	} else {
		c.projects, selErrs = compileSelector("projectSelector", w.ProjectSelector)
		errs = append(errs, selErrs...)
	}

	if len(errs) == 0 && c.rule != nil {
		if err := c.occursAtAll(); err != nil {
			fail("rrule", err)
		}
	}
	if len(errs) > 0 {
		joined := make([]error, len(errs))
		for i, e := range errs {
			e.Window = w.Name
			joined[i] = e
		}
		return nil, errors.Join(joined...)
	}
	return c, nil
}

// occursAtAll refuses a rule with no occurrence at all (BYMONTH=2;
// BYMONTHDAY=30, an UNTIL before dtstart, a BYSETPOS beyond the set): as an
// Allow window it would close its Stages for ever, and it is never what was
// meant. Finding out costs rrule-go a walk to year 9999 at most, well under
// a second, once per compile; a rule that occurs once recurs within the
// 400-year Gregorian cycle, so later expansions never walk that far.
func (c *Compiled) occursAtAll() (err error) {
	defer recoverInto(&err)
	next, err := c.rule.iterator()
	if err != nil {
		return err
	}
	wall, ok := next()
	if !ok || (!c.rule.until.IsZero() && instant(wall, c.start.loc).After(c.rule.until)) {
		return fmt.Errorf("%q has no occurrence at or after dtstart", c.Window.RRule)
	}
	return nil
}

// recoverInto turns a panic of the recurrence library into an error, so
// that one odd rule fails its window rather than the operator.
func recoverInto(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("the recurrence library panicked: %v", r)
	}
}

// Matches reports whether the window applies to the Stage: its
// stageSelector selects the Stage by name and labels and, on a ClusterConfig
// window, its projectSelector selects the Stage's Project by name and
// labels. An absent selector selects everything. A ProjectConfig window is
// asked only about Stages of its own Project: it does not know which that
// is.
func (c *Compiled) Matches(stage StageRef) bool {
	if c.ClusterWide && !c.projects.matches(stage.Project, stage.ProjectLabels) {
		return false
	}
	return c.stages.matches(stage.Name, stage.Labels)
}

// MatchingWindows returns the windows that apply to the Stage, in order.
func MatchingWindows(windows []*Compiled, stage StageRef) []*Compiled {
	var out []*Compiled
	for _, w := range windows {
		if w.Matches(stage) {
			out = append(out, w)
		}
	}
	return out
}

// Location is the zone the window's times are written in (UTC when they
// carry no TZID), for showing its times as its author thinks of them.
func (c *Compiled) Location() *time.Location { return c.start.loc }

// Duration is how long each occurrence lasts: dtend - dtstart.
func (c *Compiled) Duration() time.Duration { return c.duration }

// memo keeps a window's last expansion: renewing the horizon computes the
// same one for every Stage the window matches, and status asks about
// instants inside it.
type memo struct {
	mu             sync.Mutex
	from, until    time.Time
	maxOccurrences int
	occurrences    []Occurrence // shared: never changed once stored
	err            error
	set            bool
}

func (m *memo) get(from, until time.Time, maxOccurrences int) ([]Occurrence, error, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.set || !m.from.Equal(from) || !m.until.Equal(until) || m.maxOccurrences != maxOccurrences {
		return nil, nil, false
	}
	return m.occurrences, m.err, true
}

func (m *memo) put(from, until time.Time, maxOccurrences int, occurrences []Occurrence, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.from, m.until, m.maxOccurrences, m.occurrences, m.err, m.set = from, until, maxOccurrences, occurrences, err, true
}

// covering returns the stored expansion if it succeeded and its horizon
// holds t: it then has every occurrence active at t.
func (m *memo) covering(t time.Time) ([]Occurrence, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.set || m.err != nil || t.Before(m.from) || !t.Before(m.until) {
		return nil, false
	}
	return m.occurrences, true
}
