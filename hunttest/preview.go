package hunttest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/attrib"
	"github.com/hunt-runner/hunt-runner/runner"
	"github.com/hunt-runner/hunt-runner/schedule"
)

// DefaultMaxWindows caps the windows one preview runs (each is one query on the server):
// seven days of a one-minute hunt, what `diff` reads by default.
const DefaultMaxWindows = 7 * 24 * 60

// ErrRange is wrapped when a preview's range is empty or holds more windows than allowed.
var ErrRange = errors.New("preview range")

// Window is one schedule window of a preview and what the hunt found in it.
type Window struct {
	Fire time.Time `json:"fire"`
	// Start and End are the data window read: [Fire − interval, Fire), shifted back by the delay.
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Findings []string  `json:"findings"` // JSON documents, as a fire stores them
	Dropped  uint64    `json:"dropped"`  // rows past max_findings
}

// Windows are the windows h's schedule gives between from and to, as a runner that keeps up
// runs them: one per fire F with F − interval ≥ from and F ≤ to, each reading
// [F − interval, F) shifted back by the hunt's delay.
func Windows(h hunt.Hunt, from, to time.Time) []Window {
	iv := h.IntervalSeconds()
	if iv <= 0 {
		return nil
	}
	first := schedule.NextFire(ceilUnix(from)+iv-1, iv, h.OffsetSeconds())
	var out []Window
	for f := first; f <= to.Unix(); f += iv {
		s := schedule.RunSpan(f-iv, true, f, iv, iv)
		out = append(out, Window{Fire: time.Unix(f, 0).UTC(),
			Start: time.Unix(s.Start, 0).UTC().Add(-h.Delay), End: time.Unix(s.End, 0).UTC().Add(-h.Delay)})
	}
	return out
}

func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.After(time.Unix(s, 0)) {
		s++
	}
	return s
}

// Previewer runs hunts over past windows and writes nothing anywhere.
type Previewer struct {
	// Check is the connection the server-side containment check runs on, as the runner's loader.
	Check driver.Conn
	// Hunts is the identity hunt queries run as (run --hunts-user), or the same as Check.
	Hunts  driver.Conn
	Policy configsrc.Policy
	// MaxWindows caps the windows of one preview (DefaultMaxWindows when 0).
	MaxWindows int
	// WindowTimeout lowers the hunt's own timeout for each window, when positive and shorter.
	WindowTimeout time.Duration
	// Workload is the workload class each window's query runs in (--workload-preview); empty: none.
	Workload string
}

// Preview runs h over every window of [from, to] in order, calling each with the window's
// findings. The hunt must pass the containment check the runner applies.
func (p *Previewer) Preview(ctx context.Context, h hunt.Hunt, from, to time.Time, each func(Window) error) error {
	h = h.WithDefaults()
	windows := Windows(h, from, to)
	limit := p.MaxWindows
	if limit <= 0 {
		limit = DefaultMaxWindows
	}
	every := schedule.FormatInterval(h.Interval)
	switch {
	case len(windows) == 0:
		return fmt.Errorf("%w: %s to %s holds no whole window of hunt %s (every %s); widen it", ErrRange, rfc(from), rfc(to), h.ID, every)
	case len(windows) > limit:
		return fmt.Errorf("%w: %s to %s is %d windows of hunt %s (every %s), more than --max-windows %d; narrow the range or raise --max-windows",
			ErrRange, rfc(from), rfc(to), len(windows), h.ID, every, limit)
	}
	if err := configsrc.CheckWithServer(ctx, p.Check, h, p.Policy); err != nil {
		return fmt.Errorf("hunt %s (%s) is not run by the runner: %w", h.ID, h.File, err)
	}
	timeout := h.Timeout
	if p.WindowTimeout > 0 && p.WindowTimeout < timeout {
		timeout = p.WindowTimeout
	}
	run := h
	run.Timeout = timeout
	for _, w := range windows {
		got, err := runner.Preview(ctx, p.Hunts, run, w.Start, w.End, attrib.Preview, p.Workload)
		if err != nil {
			if timedOut(err) && ctx.Err() == nil {
				return fmt.Errorf("hunt %s, window %s to %s: took longer than %s (the hunt's timeout, lowered by --window-timeout): "+
					"preview a shorter range, or make the query cheaper", h.ID, rfc(w.Start), rfc(w.End), timeout)
			}
			return fmt.Errorf("hunt %s, window %s to %s: %s", h.ID, rfc(w.Start), rfc(w.End), serverMessage(err))
		}
		w.Findings, w.Dropped = got.Docs, got.Dropped
		if w.Findings == nil {
			w.Findings = []string{}
		}
		if err := each(w); err != nil {
			return err
		}
	}
	return nil
}

// timeoutCode is ClickHouse's TIMEOUT_EXCEEDED (max_execution_time).
const timeoutCode = 159

func timedOut(err error) bool {
	var ex *clickhouse.Exception
	if errors.As(err, &ex) && ex.Code == timeoutCode {
		return true
	}
	// The runner cuts the query client-side a little after its timeout.
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		strings.Contains(err.Error(), "(TIMEOUT_EXCEEDED)")
}
