package configsrc

import (
	"net/url"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// explainNodes holds the explain keys' nodes until the query is decoded: the templates'
// columns are checked against it.
type explainNodes struct {
	title, dedup, severityFrom *yaml.Node
}

// explain decodes one of the keys that make findings explain themselves (title, dedup,
// severity_from, runbook, mitre; docs/hunts.md) into h, and reports whether key is one. They
// are applied per finding row by hunt.Explainer.
func (d *decoder) explain(h *hunt.Hunt, n *explainNodes, key string, v *yaml.Node) bool {
	switch key {
	case "title", "dedup":
		s, ok := d.str(v, key)
		if !ok {
			return true
		}
		if len(s) > hunt.TemplateMaxBytes {
			d.at(v, "%s is %d bytes, more than %d; it is rendered into every finding and notification", key, len(s), hunt.TemplateMaxBytes)
			return true
		}
		if _, err := hunt.ParseTemplate(s); err != nil {
			d.at(v, "%s: %v", key, err)
			return true
		}
		if key == "title" {
			h.Title, n.title = s, v
		} else {
			h.Dedup, n.dedup = s, v
		}
	case "severity_from":
		if s, ok := d.str(v, key); ok {
			if !fieldRe.MatchString(s) || strings.Contains(s, ".") {
				d.at(v, "severity_from must name one output column (letters, digits and '_'); alias the column in the query")
				return true
			}
			h.SeverityFrom, n.severityFrom = s, v
		}
	case "runbook":
		if s, ok := d.str(v, key); ok {
			u, err := url.Parse(s)
			switch {
			case len(s) > hunt.RunbookMaxBytes:
				d.at(v, "runbook is %d bytes, more than %d", len(s), hunt.RunbookMaxBytes)
			case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
				d.at(v, "runbook must be an absolute http:// or https:// URL, such as https://wiki.example.com/runbooks/ssh-brute-force")
			case u.User != nil:
				d.at(v, "runbook must not carry credentials (user:password@); it is copied into every finding and notification")
			default:
				h.Runbook = s
			}
		}
	case "mitre":
		h.Mitre = d.mitre(v)
	default:
		return false
	}
	return true
}

// mitre reads mitre: [T1110, T1110.003, TA0006].
func (d *decoder) mitre(v *yaml.Node) []string {
	if v.Kind != yaml.SequenceNode {
		d.at(v, "mitre must be a list of ATT&CK ids such as [T1110.003, TA0006], not %s", YAMLKind(v))
		return nil
	}
	if len(v.Content) > hunt.MitreMaxIDs {
		d.at(v, "mitre lists %d ids, more than %d", len(v.Content), hunt.MitreMaxIDs)
		return nil
	}
	var out []string
	for _, e := range v.Content {
		e = deref(e)
		s, ok := d.str(e, "mitre entry")
		switch {
		case !ok:
		case !hunt.MitreRe.MatchString(s):
			d.at(e, "mitre id is not an ATT&CK technique (T1110), sub-technique (T1110.003) or tactic (TA0006) id")
		case slices.Contains(out, s):
			d.at(e, "mitre lists this id twice")
		default:
			out = append(out, s)
		}
	}
	return out
}

// explainColumns checks, once the query is decoded, that the columns the templates and
// severity_from name can be output columns of q. Offline the output columns are not known,
// but an output column's name is in the query's text unless a * or COLUMNS() expands it: a
// name that appears nowhere cannot be one (a typo). The server check is the authority.
func (d *decoder) explainColumns(h *hunt.Hunt, n *explainNodes, q string) {
	toks, issue := lexQuery(q)
	if issue != nil {
		return // the query check reports it
	}
	names := map[string]bool{}
	for _, t := range toks {
		switch {
		case t.kind == tkPunct && t.text == "*", t.kind == tkWord && strings.EqualFold(t.text, "COLUMNS"):
			return // expanded by the server: any name may be an output column
		case t.kind == tkWord || t.kind == tkQuoted:
			names[t.name()] = true
		}
	}
	check := func(key string, node *yaml.Node, cols []string) {
		for _, c := range cols {
			if !names[c] {
				d.at(node, "%s names {{%s}}, which is not an output column of the query (no column or alias of that name)", key, c)
			}
		}
	}
	if n.title != nil {
		t, _ := hunt.ParseTemplate(h.Title)
		check("title", n.title, t.Columns())
	}
	if n.dedup != nil {
		t, _ := hunt.ParseTemplate(h.Dedup)
		check("dedup", n.dedup, t.Columns())
	}
	if n.severityFrom != nil && !names[h.SeverityFrom] {
		d.at(n.severityFrom, "severity_from names %s, which is not an output column of the query (no column or alias of that name)", h.SeverityFrom)
	}
}
