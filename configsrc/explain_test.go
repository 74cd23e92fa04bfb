package configsrc

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

const explainQuery = "query: SELECT user, ip, sev FROM logs WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}\n"

func TestExplainKeysDecode(t *testing.T) {
	src := "interval: 5m\n" + explainQuery +
		"title: \"login from {{ip}} for {{ user }}\"\ndedup: \"{{user}}\"\nseverity_from: sev\n" +
		"runbook: https://wiki.example.com/rb/ssh\nmitre: [T1110, T1110.003, TA0006]\n"
	p, probs := decodeHunt("a.yaml", []byte(src), 0.5)
	if len(probs) > 0 {
		t.Fatal(probs)
	}
	h := p.hunt
	if h.Title != "login from {{ip}} for {{ user }}" || h.Dedup != "{{user}}" || h.SeverityFrom != "sev" ||
		h.Runbook != "https://wiki.example.com/rb/ssh" || !slices.Equal(h.Mitre, []string{"T1110", "T1110.003", "TA0006"}) {
		t.Fatalf("decoded %+v", h)
	}
	// Every explain key is part of the revision: changing one changes Hash.
	for _, change := range []string{"title: x\n", "dedup: x\n", "severity_from: ip\n", "runbook: https://x.example/\n", "mitre: [T1003]\n"} {
		key := change[:strings.Index(change, ":")]
		var lines []string
		for _, l := range strings.SplitAfter(src, "\n") {
			if !strings.HasPrefix(l, key+":") {
				lines = append(lines, l)
			}
		}
		q, probs := decodeHunt("a.yaml", []byte(strings.Join(lines, "")+change), 0.5)
		if len(probs) > 0 {
			t.Fatal(change, probs)
		}
		if q.hunt.Hash == h.Hash {
			t.Errorf("changing %s left the hash as it was", key)
		}
	}
	// A hunt without explain keys keeps the hash it had before they existed.
	plain, _ := decodeHunt("a.yaml", []byte("interval: 5m\n"+explainQuery), 0.5)
	if got := plain.hunt.ComputeHash(); got != plain.hunt.Hash || plain.hunt.Title != "" {
		t.Fatal("plain hunt hash")
	}
}

func TestExplainKeysRefused(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{"title: \"from {{ipp}}\"", "4:8: title names {{ipp}}, which is not an output column"},
		{"dedup: \"{{user\"", "4:8: dedup: unclosed {{"},
		{"title: \"{{ user.name }}\"", "4:8: title: a placeholder names one output column"},
		{"title: \"a }} b\"", "unmatched }}"},
		{"severity_from: severity", "4:16: severity_from names severity, which is not an output column"},
		{"runbook: /wiki/rb", "4:10: runbook must be an absolute http:// or https:// URL"},
		{"runbook: https://u:secret@wiki.example.com/rb", "must not carry credentials"},
		{"mitre: [T1110, t1110]", "4:16: mitre id is not an ATT&CK"},
		{"mitre: T1110", "mitre must be a list"},
		{"mitre: [T1110, T1110]", "mitre lists this id twice"},
		{"title: \"" + strings.Repeat("x", 600) + "\"", "more than 512"},
	} {
		src := "interval: 5m\n" + explainQuery + "\n" + tc.line + "\n"
		_, probs := decodeHunt("a.yaml", []byte(src), 0.5)
		got := fmt.Sprint(probs)
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: got %s, want %q", tc.line, got, tc.want)
		}
		if strings.Contains(got, "secret") {
			t.Errorf("%s: a credential is quoted: %s", tc.line, got)
		}
	}
	// A query whose columns a * expands may output any column: offline, nothing is refused.
	src := "interval: 5m\nquery: SELECT * FROM logs WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}\ntitle: \"{{anything}}\"\n"
	if _, probs := decodeHunt("a.yaml", []byte(src), 0.5); len(probs) > 0 {
		t.Fatal(probs)
	}
}
