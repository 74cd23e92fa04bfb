package configsrc

import (
	"slices"
	"strings"
	"testing"
	"time"
)

const notifyBase = "id: h\ninterval: 5m\nquery: SELECT 1 FROM t WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}\n"

func TestNotifyAndSuppressDecode(t *testing.T) {
	p, probs := decodeHunt("h.yaml", []byte(notifyBase+"notify: [soc, am]\nsuppress: {by: [host, user], for: 1h}\n"), 0.8)
	if len(probs) > 0 {
		t.Fatalf("problems: %v", probs)
	}
	h := p.hunt
	if !slices.Equal(h.Notify, []string{"soc", "am"}) {
		t.Errorf("Notify = %v", h.Notify)
	}
	if h.Suppress == nil || !slices.Equal(h.Suppress.By, []string{"host", "user"}) || h.Suppress.For != time.Hour {
		t.Errorf("Suppress = %+v", h.Suppress)
	}
}

func TestNotifyAbsentVersusEmpty(t *testing.T) {
	p, _ := decodeHunt("h.yaml", []byte(notifyBase), 0.8)
	if p.hunt.Notify != nil || p.hunt.Suppress != nil {
		t.Errorf("absent keys decoded as %v / %v", p.hunt.Notify, p.hunt.Suppress)
	}
	for _, empty := range []string{"notify: []\n", "notify:\n"} {
		p, probs := decodeHunt("h.yaml", []byte(notifyBase+empty), 0.8)
		if len(probs) > 0 || p.hunt.Notify == nil || len(p.hunt.Notify) != 0 {
			t.Errorf("%q decoded as %#v (%v); want an empty, non-nil list", empty, p.hunt.Notify, probs)
		}
	}
}

func TestNotifyAndSuppressProblems(t *testing.T) {
	tests := []struct{ extra, want string }{
		{"notify: soc\n", "h.yaml:4:9: notify must be a list"},
		{"notify: [soc, soc]\n", "h.yaml:4:15: sink \"soc\" is listed twice"},
		{"notify: [\"bad name\"]\n", "h.yaml:4:10: sink name is not valid"},
		{"notify: [1]\n", "h.yaml:4:10: notify entry must be a string"},
		{"suppress: 1h\n", "h.yaml:4:11: suppress must be a mapping"},
		{"suppress: {for: 1h}\n", "h.yaml:4:11: suppress needs by:"},
		{"suppress: {by: [host]}\n", "h.yaml:4:11: suppress needs for:"},
		{"suppress: {by: [], for: 1h}\n", "h.yaml:4:16: suppress.by must be a non-empty list"},
		{"suppress: {by: [host, host], for: 1h}\n", "h.yaml:4:23: suppress.by lists this field twice"},
		{"suppress: {by: [host], for: 0}\n", "h.yaml:4:29: suppress.for"},
		{"suppress: {by: [host], for: 60d}\n", "h.yaml:4:29: suppress.for 60d is longer than"},
		{"suppress: {by: [host], for: 1h, fro: 2}\n", "h.yaml:4:33: unknown key; known keys: by, for"},
	}
	for _, tt := range tests {
		_, probs := decodeHunt("h.yaml", []byte(notifyBase+tt.extra), 0.8)
		found := false
		for _, p := range probs {
			if strings.HasPrefix(p.Error(), tt.want) {
				found = true
			}
		}
		if !found {
			t.Errorf("%q: problems %v, want one starting %q", tt.extra, probs, tt.want)
		}
	}
}
