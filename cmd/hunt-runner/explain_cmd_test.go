package main

import (
	"strings"
	"testing"
)

// TestStatusLinkFlagsRefuseCredentials: the status page's links out are shown to every reader,
// so run and dev refuse them with credentials or not http(s), naming the flag and not the
// secret; a clean URL goes on (to the connection, which fails here: nothing listens).
func TestStatusLinkFlagsRefuseCredentials(t *testing.T) {
	t.Setenv(passwordEnv, "")
	dir := t.TempDir()
	writeHunt(t, dir, "a.yaml", "id: a\ninterval: 1h\n"+huntQuery)
	common := []string{"--hunts-dir", dir, "--clickhouse-url", "http://" + closedPort(t), "--clickhouse-connect-timeout", "1ms", "--listen", "127.0.0.1:0"}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--clickhouse-web-url", "https://u:s3cret@ch.example.com/play"}, exitUsage, "--clickhouse-web-url must not carry credentials"},
		{[]string{"--clickhouse-web-url", "https://ch.example.com/play?user=u&password=s3cret"}, exitUsage, "--clickhouse-web-url must not carry credentials"},
		{[]string{"--git-commit-url", "git.example.com/commit/"}, exitUsage, "--git-commit-url must be an absolute"},
		{[]string{"--clickhouse-web-url", "https://ch.example.com/play", "--git-commit-url", "https://git.example.com/c/"}, exitError, ""},
	} {
		_, err := runApp(t, append(append([]string{"run"}, c.args...), common...)...)
		if schedExit(err) != c.code {
			t.Errorf("%v: exit %d (%v), want %d", c.args, schedExit(err), err, c.code)
		}
		if c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "s3cret")) {
			t.Errorf("%v: %v, want %q and no secret", c.args, err, c.want)
		}
	}
}
