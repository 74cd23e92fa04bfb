package configsrc

import (
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// MaxSuppressFor bounds suppress.for: the suppression table keeps its rows 90 days, and a
// window near that would silently stop holding once rows expire.
const MaxSuppressFor = 30 * 24 * time.Hour

// notify reads notify: [sink, …]. An explicit empty list is kept (non-nil): it means "send
// nothing", which differs from leaving the key out.
func (d *decoder) notify(v *yaml.Node) []string {
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" {
		return []string{}
	}
	if v.Kind != yaml.SequenceNode {
		d.at(v, "notify must be a list of sink names such as [soc], not %s", YAMLKind(v))
		return nil
	}
	out := []string{}
	seen := map[string]bool{}
	for _, n := range v.Content {
		n = deref(n)
		s, ok := d.str(n, "notify entry")
		if !ok {
			continue
		}
		if !hunt.SinkNameRe.MatchString(s) {
			d.at(n, "sink name is not valid: letters, digits, '_', '.', '-', starting with a letter or digit")
			continue
		}
		if seen[s] {
			d.at(n, "sink %q is listed twice", s)
			continue
		}
		seen[s] = true
		out = append(out, s)
	}
	return out
}

// suppress reads suppress: {by: [field, …], for: 1h}.
func (d *decoder) suppress(v *yaml.Node) *hunt.Suppress {
	if v.Kind != yaml.MappingNode {
		d.at(v, "suppress must be a mapping such as {by: [host], for: 1h}, not %s", YAMLKind(v))
		return nil
	}
	order, f := d.fields(v, "suppress.")
	s := &hunt.Suppress{}
	var byN, forN *yaml.Node
	for _, key := range order {
		k, n := f[key][0], f[key][1]
		switch key {
		case "by":
			byN = n
		case "for":
			forN = n
		default:
			d.unknownKey(k, "suppress.", []string{"by", "for"})
		}
	}
	if byN == nil {
		d.at(v, "suppress needs by: the finding fields that make two findings the same, e.g. by: [host]")
	} else if byN.Kind != yaml.SequenceNode || len(byN.Content) == 0 {
		d.at(byN, "suppress.by must be a non-empty list of finding fields, not %s", YAMLKind(byN))
	} else {
		seen := map[string]bool{}
		for _, n := range byN.Content {
			n = deref(n)
			if name, ok := d.str(n, "suppress.by entry"); ok {
				switch {
				case name == "":
					d.at(n, "suppress.by entry is empty")
				case seen[name]:
					d.at(n, "suppress.by lists this field twice")
				default:
					seen[name] = true
					s.By = append(s.By, name)
				}
			}
		}
	}
	if forN == nil {
		d.at(v, "suppress needs for: how long a notified finding stays suppressed, e.g. for: 1h")
	} else if dur := d.duration(forN, "suppress.for", false); dur > 0 {
		if dur > MaxSuppressFor {
			d.at(forN, "suppress.for %s is longer than the 30d the suppression state is kept", forN.Value)
		}
		s.For = dur
	}
	return s
}
