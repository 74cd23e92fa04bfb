package hunttest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/hunt"
)

// Change says how a hunt differs between the base and the working tree.
type Change string

const (
	Changed Change = "changed"
	New     Change = "new"
	Deleted Change = "deleted"
)

// HuntDiff is what a change to one hunt adds and removes over the range. Findings are JSON
// documents compared over the whole range (a document found in any window), so a change of
// interval that finds the same rows shows no difference.
type HuntDiff struct {
	Hunt    string   `json:"hunt"`
	Change  Change   `json:"change"`
	File    string   `json:"file,omitempty"`
	Added   []string `json:"added"`
	Removed []string `json:"removed"`
	Error   string   `json:"error,omitempty"` // the preview failed: nothing is known of this hunt's findings
}

// Diff is the report of `hunt-runner diff`.
type Diff struct {
	From     time.Time           `json:"from"`
	To       time.Time           `json:"to"`
	Hunts    []HuntDiff          `json:"hunts"`
	Problems []configsrc.Problem `json:"problems"` // invalid hunt files in the working tree
}

// Diff previews every hunt that differs between base and head over [from, to]: a changed hunt
// old and new, a new hunt as it is; a deleted hunt (or one disabled) is listed. Hunts are
// compared by id and definition hash.
func (p *Previewer) Diff(ctx context.Context, base, head *configsrc.Set, from, to time.Time) *Diff {
	d := &Diff{From: from, To: to, Hunts: []HuntDiff{}, Problems: append([]configsrc.Problem{}, head.Problems...)}
	old := enabled(base)
	cur := enabled(head)
	for id, h := range cur {
		o, had := old[id]
		switch {
		case !had:
			hd := HuntDiff{Hunt: id, Change: New, File: h.File, Removed: []string{}}
			hd.Added, hd.Error = p.findings(ctx, h, from, to)
			d.Hunts = append(d.Hunts, hd)
		case o.Hash != h.Hash:
			hd := HuntDiff{Hunt: id, Change: Changed, File: h.File}
			before, errOld := p.findings(ctx, o, from, to)
			after, errNew := p.findings(ctx, h, from, to)
			switch {
			case errNew != "":
				hd.Error = errNew
			case errOld != "":
				hd.Error = "the base version: " + errOld
			}
			if hd.Error == "" {
				hd.Added, hd.Removed = setDiff(after, before), setDiff(before, after)
			}
			d.Hunts = append(d.Hunts, hd)
		}
	}
	for id, o := range old {
		if _, ok := cur[id]; !ok {
			d.Hunts = append(d.Hunts, HuntDiff{Hunt: id, Change: Deleted, File: o.File, Added: []string{}, Removed: []string{}})
		}
	}
	for i := range d.Hunts {
		if d.Hunts[i].Added == nil {
			d.Hunts[i].Added = []string{}
		}
		if d.Hunts[i].Removed == nil {
			d.Hunts[i].Removed = []string{}
		}
	}
	slices.SortFunc(d.Hunts, func(a, b HuntDiff) int { return strings.Compare(a.Hunt, b.Hunt) })
	return d
}

func enabled(s *configsrc.Set) map[string]hunt.Hunt {
	out := map[string]hunt.Hunt{}
	if s == nil {
		return out
	}
	for _, h := range s.Enabled() {
		out[h.ID] = *h
	}
	return out
}

// findings are the distinct findings of h over the range, sorted, or why they are unknown.
func (p *Previewer) findings(ctx context.Context, h hunt.Hunt, from, to time.Time) ([]string, string) {
	seen := map[string]bool{}
	err := p.Preview(ctx, h, from, to, func(w Window) error {
		for _, f := range w.Findings {
			seen[f] = true
		}
		return nil
	})
	if err != nil {
		return nil, err.Error()
	}
	out := make([]string, 0, len(seen))
	for f := range seen {
		out = append(out, f)
	}
	slices.Sort(out)
	return out, ""
}

// maxListed bounds the findings listed per hunt in the Markdown report (the JSON has them all).
const maxListed = 20

// WriteMarkdown writes the report as a pull-request comment.
func (d *Diff) WriteMarkdown(w io.Writer) {
	counts := map[Change]int{}
	for _, h := range d.Hunts {
		counts[h.Change]++
	}
	fmt.Fprintf(w, "## hunt-runner diff: %d changed, %d new, %d deleted\n\n", counts[Changed], counts[New], counts[Deleted])
	fmt.Fprintf(w, "Findings over %s to %s, window by window as each hunt's schedule runs.\n", rfc(d.From), rfc(d.To))
	if len(d.Hunts) == 0 {
		fmt.Fprintln(w, "\nNo hunt changed.")
	}
	for _, h := range d.Hunts {
		fmt.Fprintf(w, "\n### `%s` (%s)\n\n", h.Hunt, h.Change)
		switch {
		case h.Error != "":
			fmt.Fprintf(w, "Could not be previewed: %s\n", h.Error)
		case h.Change == Deleted:
			fmt.Fprintln(w, "Deleted (or disabled): its findings stop.")
		default:
			fmt.Fprintf(w, "**+%d** added, **−%d** removed.\n", len(h.Added), len(h.Removed))
			listFindings(w, "Added", h.Added)
			listFindings(w, "Removed", h.Removed)
		}
	}
	if len(d.Problems) > 0 {
		fmt.Fprintf(w, "\n### Invalid hunt files (not previewed)\n\n")
		for _, p := range d.Problems {
			fmt.Fprintf(w, "- `%s`\n", p.Error())
		}
	}
}

func listFindings(w io.Writer, what string, docs []string) {
	if len(docs) == 0 {
		return
	}
	fmt.Fprintf(w, "\n<details><summary>%s (%d)</summary>\n\n```json\n", what, len(docs))
	for i, doc := range docs {
		if i == maxListed {
			fmt.Fprintf(w, "… and %d more (--json lists them all)\n", len(docs)-i)
			break
		}
		fmt.Fprintln(w, strings.ReplaceAll(doc, "```", "`\u200b``"))
	}
	fmt.Fprintln(w, "```\n\n</details>")
}

// WriteJSON writes the report for machines.
func (d *Diff) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(d)
}
