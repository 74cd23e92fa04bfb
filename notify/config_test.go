package notify

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
)

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseConfig(t *testing.T) {
	dir := t.TempDir()
	key := secret(t)
	secretPath := writeFile(t, dir, "hook-secret", append(key, '\n'))
	slackPath := writeFile(t, dir, "slack-url", []byte("https://hooks.slack.com/services/"+string(secret(t))+"\n"))
	cfg, err := ParseConfig("notify.yaml", []byte(`
sinks:
  - name: soc
    type: webhook
    url: http://hooks.internal/hunts
    secret_file: `+secretPath+`
  - name: am
    type: alertmanager
    urls: [http://am-0:9093, http://am-1:9093]
    timeout: 3s
    resolve_after: 2h
    lookback: 6h
  - name: chat
    type: slack
    url_file: `+slackPath+`
routes:
  - match: {severity: critical}
    sinks: [am, soc]
  - match: {labels: {team: net}}
    sinks: [chat]
  - sinks: [soc]
max_notify_findings: 5
retry_horizon: 6h
external_url: https://hunts.example.com/
`))
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := cfg.Sink("soc"); string(s.Secret) != string(key) {
		t.Error("secret_file not read (or its newline kept)")
	}
	if s, _ := cfg.Sink("chat"); !strings.HasPrefix(s.URLs[0], "https://hooks.slack.com/services/") {
		t.Error("url_file not read")
	}
	if s, _ := cfg.Sink("am"); len(s.URLs) != 2 || s.ResolveAfter != 2*time.Hour || s.Lookback != 6*time.Hour {
		t.Errorf("am sink %+v", s)
	}
	if s, _ := cfg.Sink("soc"); s.ResolveAfter != ResolveAfterDefault || s.Lookback != 0 {
		t.Errorf("defaults not applied: %+v", s)
	}
	if cfg.ExternalURL != "https://hunts.example.com" {
		t.Errorf("external_url %q", cfg.ExternalURL)
	}
	if cfg.MaxFindings != 5 || cfg.Horizon.Hours() != 6 {
		t.Errorf("max %d horizon %s", cfg.MaxFindings, cfg.Horizon)
	}
	for _, tt := range []struct {
		h    hunt.Hunt
		want []string
	}{
		{hunt.Hunt{ID: "a", Severity: "critical"}, []string{"am", "soc"}},
		{hunt.Hunt{ID: "b", Severity: "low", Labels: map[string]string{"team": "net"}}, []string{"chat"}},
		{hunt.Hunt{ID: "c", Severity: "low"}, []string{"soc"}},
		{hunt.Hunt{ID: "d", Severity: "critical", Notify: []string{"chat"}}, []string{"chat"}},
		{hunt.Hunt{ID: "e", Severity: "critical", Notify: []string{}}, []string{}},
	} {
		if got := cfg.SinksFor(&tt.h); !slices.Equal(got, tt.want) {
			t.Errorf("SinksFor(%s) = %v, want %v", tt.h.ID, got, tt.want)
		}
	}
	if u := cfg.UnknownSinks(&hunt.Hunt{Notify: []string{"soc", "nope"}}); !slices.Equal(u, []string{"nope"}) {
		t.Errorf("UnknownSinks = %v", u)
	}
}

func TestParseConfigErrors(t *testing.T) {
	dir := t.TempDir()
	empty := writeFile(t, dir, "empty", nil)
	tests := []struct{ yaml, want string }{
		{"sinks: [{name: a, type: webhook, url: 'http://u:p@h/x'}]", "n.yaml:1:39: url carries credentials"},
		{"sinks: [{name: a, type: slack, url: 'https://hooks.slack.com/services/x'}]", "n.yaml:1:37: a Slack incoming-webhook URL is a credential"},
		{"sinks: [{name: a, type: webhook, url: 'ftp://h/x'}]", "n.yaml:1:39: url must start with http"},
		{"sinks: [{name: a, type: pager, url: 'http://h'}]", "n.yaml:1:25: sink type \"pager\""},
		{"sinks: [{name: a, type: webhook, url: 'http://h', secret_file: " + filepath.Join(dir, "missing") + "}]", "n.yaml:1:64: secret_file: cannot read"},
		{"sinks: [{name: a, type: webhook, url: 'http://h', secret_file: " + empty + "}]", "n.yaml:1:64: secret_file: " + empty + " is empty"},
		{"sinks: [{name: a, type: alertmanager, url: 'http://h', secret_file: x}]", "n.yaml:1:69: secret_file signs webhook bodies"},
		{"sinks: [{name: a, type: webhook}]", "n.yaml:1:9: sink \"a\" needs url"},
		{"sinks: [{name: a, type: webhook, url: 'http://h', colour: red}]", "n.yaml:1:51: unknown key \"sink.colour\""},
		{"sinks: [{name: a, type: webhook, url: 'http://h'}, {name: a, type: webhook, url: 'http://h'}]", "n.yaml:1:52: sink \"a\" is defined twice"},
		{"sinks: [{name: a, type: webhook, url: 'http://h'}]\nroutes: [{sinks: [b]}]", "n.yaml:2:19: route names sink \"b\""},
		{"sinks: [{name: a, type: webhook, url: 'http://h'}]\nroutes: [{match: {severity: high}}]", "n.yaml:2:10: route needs sinks"},
		{"sinks: []\nmax_notify_findings: many", "n.yaml:2:22: max_notify_findings must be a whole number"},
		{"sinks: []\nretry_horizon: 0s", "n.yaml:2:16: retry_horizon must be a positive duration"},
		{"sink: []", "n.yaml:1:1: unknown key \"sink\""},
		{"sinks: [\n", "n.yaml:"},
		{"", "n.yaml:1:1: notify config is empty"},
		{"sinks: [{name: a, type: webhook, url: 'http://h'}]\nroutes: [{match: {severty: high}, sinks: [a]}]", "n.yaml:2:19: unknown match key \"severty\""},
		{"sinks: [{name: a, type: webhook, url: 'http://h'}]\nroutes: [{match: {team: net}, sinks: [a]}]", "labels: {team: ...}"},
		{"sinks: [{name: a, type: webhook, urls: ['http://h']}]", "n.yaml:1:40: urls lists Alertmanager replicas"},
		{"sinks: [{name: a, type: alertmanager, urls: ['http://h', 'http://h']}]", "urls lists the same Alertmanager twice"},
		{"sinks: [{name: a, type: alertmanager, url: 'http://h', urls: ['http://g']}]", "sets more than one of url, urls and url_file"},
		{"sinks: [{name: a, type: alertmanager, url: 'http://h', bearer_token_file: " + empty + ", basic_auth: {username: u}}]", "basic_auth needs password_file"},
		{"sinks: [{name: a, type: alertmanager, url: 'http://h', basic_auth: {username: u, password: p}}]", "unknown key \"basic_auth.password\""},
		{"sinks: [{name: a, type: alertmanager, url: 'http://h', tls_config: {cert_file: x}}]", "needs both cert_file and key_file"},
		{"sinks: [{name: a, type: alertmanager, url: 'http://h', tls_config: {ca_file: " + empty + "}}]", "holds no PEM certificate"},
		{"sinks: [{name: a, type: webhook, url: 'http://h', lookback: 30d}]", "lookback must be a positive duration"},
		{"sinks: [{name: a, type: webhook, url: 'http://h', lookback: 200h}]", "lookback is at most 168h0m0s"},
		{"sinks: [{name: a, type: webhook, url: 'http://h', resolve_after: 1h}]", "resolve_after sets an Alertmanager alert's endsAt"},
		{"external_url: 'hunts.example.com'\nsinks: []", "n.yaml:1:15: url must start with http"},
		// The shared reader: a typo gets a did-you-mean, a non-string key names its kind.
		{"sinks: [{name: a, type: webhook, url: 'http://h', timout: 5s}]", `n.yaml:1:51: unknown key "sink.timout" (did you mean "sink.timeout"?)`},
		{"sinks: []\n[x]: 1", "n.yaml:2:1: keys must be plain names, not a list"},
	}
	for _, tt := range tests {
		_, err := ParseConfig("n.yaml", []byte(tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want it to contain %q", tt.yaml, err, tt.want)
		}
	}
	// An unreadable token file is reported as such, and the route naming that sink is not
	// also told the sink is undefined.
	_, err := ParseConfig("n.yaml", []byte("sinks: [{name: am, type: alertmanager, url: 'http://h', bearer_token_file: "+
		filepath.Join(dir, "missing")+"}]\nroutes: [{sinks: [am]}]"))
	if err == nil || !strings.Contains(err.Error(), "bearer_token_file: cannot read") || strings.Contains(err.Error(), "not defined") {
		t.Errorf("unreadable token file: %v", err)
	}
	// A URL from a file is never repeated in an error: it may be the credential.
	pw := string(secret(t))
	urlFile := writeFile(t, dir, "u", []byte("https://user:"+pw+"@h/x"))
	_, err = ParseConfig("n.yaml", []byte("sinks: [{name: a, type: webhook, url_file: "+urlFile+"}]"))
	if err == nil || strings.Contains(err.Error(), pw) {
		t.Errorf("credentials in url_file: %v", err)
	}
}

// A message quotes at most 64 bytes of a value from the file, escaped: a hostile config cannot
// flood the output or forge lines (newline, ESC) in it.
func TestConfigMessagesQuoteLittleAndEscaped(t *testing.T) {
	long := strings.Repeat("k", 1000) + `\e[2J\n` // YAML escapes: ESC, newline
	for _, y := range []string{
		"sinks: [{name: a, type: webhook, url: 'http://h', \"" + long + "\": 1}]",
		"sinks: [{name: \"a\\nfake: line\\u001b\", type: webhook, url: 'http://h'}]",
		"sinks: [{name: a, type: webhook, url: 'http://h'}]\nroutes: [{match: {\"" + long + "\": x}, sinks: [a]}]",
	} {
		_, err := ParseConfig("n.yaml", []byte(y))
		if err == nil {
			t.Fatalf("%q accepted", y[:40])
		}
		msg := err.Error()
		if strings.ContainsAny(msg, "\n\x1b") || len(msg) > 400 {
			t.Errorf("message of %d bytes, or with a raw newline or ESC: %q", len(msg), msg)
		}
	}
}

// Aliases are followed like in hunt files (yamlpos.Pairs): a sink's settings may be shared.
func TestParseConfigAliases(t *testing.T) {
	c, err := ParseConfig("n.yaml", []byte("sinks:\n- {name: a, type: webhook, url: 'http://h', timeout: &t 5s}\n- {name: b, type: webhook, url: 'http://h', timeout: *t}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := c.Sink("b"); s.Timeout != 5*time.Second {
		t.Fatalf("aliased timeout = %v, want 5s", s.Timeout)
	}
}

// A YAML syntax error is positioned and never quotes the document (yamlpos.SyntaxError).
func TestParseConfigSyntaxErrorHidesContent(t *testing.T) {
	_, err := ParseConfig("n.yaml", []byte("sinks: []\nroutes: *s3cr3t\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "n.yaml:1:1: unknown anchor") || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("syntax error: %v", err)
	}
}
