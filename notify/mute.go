package notify

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/alertmanager/timeinterval"
	yamlv2 "go.yaml.in/yaml/v2"
	"go.yaml.in/yaml/v3"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/store"
)

// StatusMuted is a delivery that was due while its sink, its route or its hunt was muted (a
// mute time interval, or a snooze). It is final: the notification is never sent later, so the
// end of a quiet hour does not bring a burst of stale pages.
const StatusMuted = store.DeliveryMuted

// Mutes are judged when a delivery is about to be sent (after its claim is verified), not at
// the fire: a quiet hour protects the person, so what counts is when they would be disturbed
// (docs/findings.md, "Quiet hours").

// muteRef is a name given in a mute_time_intervals list, kept to check it once every
// time_intervals entry is read.
type muteRef struct {
	name string
	node *yaml.Node
}

// timeIntervalKeys are the keys of one Alertmanager time interval.
var timeIntervalKeys = []string{"days_of_month", "location", "months", "times", "weekdays", "years"}

// timeIntervals reads time_intervals: [{name, time_intervals: [...]}], Alertmanager's syntax
// and semantics (its timeinterval package decodes each key, so a range Alertmanager refuses is
// refused here, at the line of the key).
func (p *cfgParser) timeIntervals(c *Config, v *yaml.Node) {
	if v.Kind != yaml.SequenceNode {
		p.at(v, "time_intervals must be a list of {name, time_intervals}")
		return
	}
	c.TimeIntervals = map[string][]timeinterval.TimeInterval{}
	lines := map[string]int{}
	for _, n := range v.Content {
		if n.Kind != yaml.MappingNode {
			p.at(n, "a time_intervals entry must be a mapping {name, time_intervals}")
			continue
		}
		var name string
		var list *yaml.Node
		for _, kv := range p.pairs(n, "time_intervals.") {
			switch kv[0].Value {
			case "name":
				if s, ok := p.str(kv[1], "time_intervals.name"); ok {
					name = s
				}
			case "time_intervals":
				list = kv[1]
			default:
				p.at(kv[0], "unknown key %s; known keys: name, time_intervals", printable("time_intervals."+kv[0].Value))
			}
		}
		if name == "" {
			p.at(n, "a time_intervals entry needs name:")
			continue
		}
		if line, dup := lines[name]; dup {
			p.at(n, "time interval %s is defined twice (first at line %d)", printable(name), line)
			continue
		}
		lines[name] = n.Line
		var tis []timeinterval.TimeInterval
		switch {
		case list == nil:
			// Alertmanager accepts an entry without intervals; it matches no time.
		case list.Kind != yaml.SequenceNode:
			p.at(list, "time_intervals.time_intervals must be a list of {times, weekdays, days_of_month, months, years, location}")
		default:
			for _, in := range list.Content {
				if ti, ok := p.timeInterval(name, in); ok {
					tis = append(tis, ti)
				}
			}
		}
		c.TimeIntervals[name] = tis
	}
}

// timeInterval decodes one interval key by key through Alertmanager's decoder, so each error
// points at its own key.
func (p *cfgParser) timeInterval(name string, n *yaml.Node) (timeinterval.TimeInterval, bool) {
	var ti timeinterval.TimeInterval
	if n.Kind != yaml.MappingNode {
		p.at(n, "time interval %s: an interval must be a mapping of %s", printable(name), strings.Join(timeIntervalKeys, ", "))
		return ti, false
	}
	ok := true
	for _, kv := range p.pairs(n, "time_intervals.") {
		k, v := kv[0], kv[1]
		if !slices.Contains(timeIntervalKeys, k.Value) {
			p.at(k, "time interval %s: unknown key %s; known keys: %s", printable(name), printable(k.Value), strings.Join(timeIntervalKeys, ", "))
			ok = false
			continue
		}
		one := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{k, v}}
		b, err := yaml.Marshal(one)
		if err == nil {
			err = yamlv2.UnmarshalStrict(b, &ti)
		}
		if err != nil {
			p.at(v, "time interval %s: %s: %s", printable(name), k.Value, v2Message(err))
			ok = false
		}
	}
	return ti, ok
}

// v2Message drops the decoder's prefix and its line within the one-key document.
func v2Message(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	s = strings.TrimPrefix(s, "unmarshal errors:\n")
	s = strings.TrimSpace(s)
	if i := strings.Index(s, ": "); strings.HasPrefix(s, "line ") && i > 0 {
		s = s[i+2:]
	}
	return s
}

// muteNames reads a mute_time_intervals list; the names are checked by checkMuteRefs.
func (p *cfgParser) muteNames(v *yaml.Node) []string {
	if v.Kind != yaml.SequenceNode {
		p.at(v, "mute_time_intervals must be a list of time interval names")
		return nil
	}
	var out []string
	for _, n := range v.Content {
		if s, ok := p.str(n, "mute_time_intervals item"); ok {
			p.muteRefs = append(p.muteRefs, muteRef{s, n})
			out = append(out, s)
		}
	}
	return out
}

// checkMuteRefs reports the mute_time_intervals names that no time_intervals entry defines.
func (p *cfgParser) checkMuteRefs(c *Config) {
	for _, r := range p.muteRefs {
		if _, ok := c.TimeIntervals[r.name]; !ok {
			p.at(r.node, "mute_time_intervals names %s, which is not defined under time_intervals:", printable(r.name))
		}
	}
}

// routeFor is the first route matching h, or nil.
func (c *Config) routeFor(h *hunt.Hunt) *Route {
	for i := range c.Routes {
		if c.Routes[i].matches(h) {
			return &c.Routes[i]
		}
	}
	return nil
}

// muteIntervals lists the time intervals that mute h's deliveries to sink: the sink's own,
// and those of the route that sent h to it (none when h names its sinks with notify:).
func (c *Config) muteIntervals(h *hunt.Hunt, sink string) []string {
	var out []string
	if s, ok := c.Sink(sink); ok {
		out = append(out, s.MuteTimeIntervals...)
	}
	if h.Notify == nil {
		if r := c.routeFor(h); r != nil && slices.Contains(r.Sinks, sink) {
			out = append(out, r.MuteTimeIntervals...)
		}
	}
	return out
}

// MutedBy says why h's delivery to sink is muted at t, or ok false: a live snooze of the
// hunt, else the first of its mute time intervals that contains t.
func (c *Config) MutedBy(h *hunt.Hunt, sink string, snooze store.Snooze, t time.Time) (why string, ok bool) {
	if snooze.LiveAt(t) {
		why = "snoozed by " + snooze.By
		if !snooze.Until.IsZero() {
			why += " until " + snooze.Until.UTC().Format(time.RFC3339)
		}
		if snooze.Reason != "" {
			why += ": " + snooze.Reason
		}
		return why, true
	}
	names := c.muteIntervals(h, sink)
	if len(names) == 0 {
		return "", false
	}
	// Every name was checked at parse time, so Mutes cannot fail on an unknown one.
	muted, which, _ := timeinterval.NewIntervener(c.TimeIntervals).Mutes(names, t)
	if !muted {
		return "", false
	}
	return "muted by time interval " + strings.Join(which, ", "), true
}

// readSnoozes reads every hunt's newest snooze row, for one poll.
func (d *Dispatcher) readSnoozes(ctx context.Context) error {
	s, err := d.st.Snoozes(ctx)
	if err != nil {
		return fmt.Errorf("notify: read snoozes: %w", err)
	}
	d.snoozes = s
	return nil
}

// muted judges a claimed delivery at now (the server clock, or Options.Clock when set).
func (d *Dispatcher) muted(h *hunt.Hunt, c store.Delivery, now time.Time) (string, bool) {
	if d.o.Clock != nil {
		now = d.o.Clock()
	}
	return d.o.Config.MutedBy(h, c.Sink, d.snoozes[c.HuntID], now)
}
