package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/attrib"
	"github.com/hunt-runner/hunt-runner/runner"
	"github.com/hunt-runner/hunt-runner/schedule"
)

// huntSetFlag names the hunt set a command publishes, runs or shows (docs/schedule.md, "Hunt
// sets"). A new one each time, as logLevelFlag.
func huntSetFlag() cli.Flag {
	return &cli.StringFlag{Name: "hunt-set", Value: hunt.HuntSetDefault, EnvVars: envFor("hunt-set"),
		Usage: "hunt set (team or release) this command works on; sets share a database, and materialise tombstones only its own set's hunts"}
}

// huntSet reads a validated --hunt-set. Empty (unset, or an empty HUNT_RUNNER_HUNT_SET, as a
// template may render) means empty: every set for due, the default set elsewhere.
func huntSet(c *cli.Context, empty string) (string, error) {
	set := c.String("hunt-set")
	if set == "" {
		return empty, nil
	}
	if err := schedule.ValidateHuntSet(set); err != nil {
		return "", cli.Exit("--hunt-set: "+err.Error(), exitUsage)
	}
	return set, nil
}

// workloadFlags are run's workload classes of live fires and backfill chunks
// (docs/operations.md, "Workload classes"); empty sends no workload setting.
func workloadFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "workload-live", Value: attrib.WorkloadLiveDefault, EnvVars: envFor("workload-live"),
			Usage: "server workload (CREATE WORKLOAD) of live fires' statements: source checks, the hunt's SELECT, its findings insert; must exist on the server. Empty: no workload setting"},
		&cli.StringFlag{Name: "workload-backfill", Value: attrib.WorkloadBackfillDefault, EnvVars: envFor("workload-backfill"),
			Usage: "server workload of backfill chunks' statements, so a backfill does not starve live fires; must exist on the server. Empty: no workload setting"},
	}
}

// workloadPreviewFlag is the workload class of preview, diff and test.
func workloadPreviewFlag() cli.Flag {
	return &cli.StringFlag{Name: "workload-preview", Value: attrib.WorkloadPreviewDefault, EnvVars: envFor("workload-preview"),
		Usage: "server workload (CREATE WORKLOAD) the hunt's queries run in; must exist on the server. Empty: no workload setting"}
}

// checkWorkloads refuses a class the server does not know, naming the flag and the SQL that
// creates it.
func checkWorkloads(c *cli.Context, conn driver.Conn, w attrib.Workloads) error {
	if err := attrib.CheckWorkloads(c.Context, conn, w); err != nil {
		return cli.Exit(err.Error(), exitUsage)
	}
	return nil
}

// envFor derives the environment variable of a flag: --clickhouse-url → HUNT_RUNNER_CLICKHOUSE_URL.
func envFor(name string) []string {
	return []string{"HUNT_RUNNER_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))}
}

// logLevelFlag is new for every app: urfave/cli stores a value read from the environment in
// the flag itself, so a shared flag would carry one run's HUNT_RUNNER_LOG_LEVEL into the next.
// metricsPerHuntFlag opts into metric series per hunt (runner.WithPerHunt), for run and dev.
func metricsPerHuntFlag() cli.Flag {
	return &cli.IntFlag{Name: "metrics-per-hunt", Value: runner.MetricsPerHuntDefault, EnvVars: envFor("metrics-per-hunt"),
		Usage: fmt.Sprintf("give at most this many hunts metric series of their own (hunt_id label; up to %d): the first in id order of "+
			"each set loaded, kept until restart. 0: totals only, per-hunt detail is in the status API and ClickHouse", runner.MetricsPerHuntMax)}
}

func logLevelFlag() cli.Flag {
	return &cli.StringFlag{Name: "log-level", Value: "info", EnvVars: envFor("log-level"),
		Usage: "log level: debug, info, warn or error"}
}

// parseDuration is the one duration grammar of every flag: the hunt files' (30s, 15m, 1h30m,
// 7d, 1d12h, a bare integer of seconds; schedule.ParseDuration), plus Go's sub-second units and
// fractions (500ms, 1.5h) for the runner's timings, and 0. A refusal is the hunt grammar's,
// which names the value and the unit it does not know.
func parseDuration(text string) (time.Duration, error) {
	d, err := schedule.ParseDuration(text)
	if err == nil {
		return d, nil
	}
	if g, gerr := time.ParseDuration(strings.TrimSpace(text)); gerr == nil && g >= 0 {
		return g, nil
	}
	return 0, fmt.Errorf("%w (flags also take ms and fractions such as 1.5h)", err)
}

// durationValue is a flag.Value read by parseDuration. String is Go's form, which is what
// urfave/cli's Context.Duration parses back, so callers read it with c.Duration.
type durationValue time.Duration

func (d *durationValue) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "invalid duration "+fmt.Sprintf("%q", s)+": "))
	}
	*d = durationValue(v)
	return nil
}

func (d *durationValue) String() string { return time.Duration(*d).String() }

// durationFlag turns a DurationFlag declaration into a flag read by parseDuration (urfave/cli's
// own reads only Go's form, so "7d" was refused by some commands and taken by others).
func durationFlag(f *cli.DurationFlag) cli.Flag {
	v := durationValue(f.Value)
	def := f.Value.String()
	if f.Value%time.Second == 0 && f.Value > 0 {
		def = schedule.FormatInterval(f.Value)
	}
	return &cli.GenericFlag{Name: f.Name, Aliases: f.Aliases, Usage: f.Usage, EnvVars: f.EnvVars, Hidden: f.Hidden,
		Required: f.Required, Category: f.Category, Value: &v, DefaultText: def}
}

// chdbLibFlag names the embedded engine's library, for the commands that can start it (dev,
// test and validate without a server).
func chdbLibFlag() cli.Flag {
	return &cli.StringFlag{Name: "chdb-lib", EnvVars: []string{"CHDB_LIB_PATH"}, Usage: "path of libchdb.so, the embedded engine (make chdb)"}
}

// clickhouseFlags are shared by every command that talks to ClickHouse.
func clickhouseFlags() []cli.Flag { return clickhouseFlagsWith(30 * time.Second) }

// clickhouseFlagsWith are clickhouseFlags with the given first-connection timeout.
func clickhouseFlagsWith(connectTimeout time.Duration) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "clickhouse-url", Value: "clickhouse://localhost:9000", EnvVars: envFor("clickhouse-url"),
			Usage: "ClickHouse address: clickhouse://host:9000 (native) or http(s)://host:8123; a password in it is refused (use HUNT_RUNNER_CLICKHOUSE_PASSWORD or --clickhouse-password-file)"},
		&cli.StringFlag{Name: "database", Value: chstore.DefaultDatabase, EnvVars: envFor("database"),
			Usage: "database holding hunt-runner's coordination tables"},
		&cli.StringFlag{Name: "clickhouse-user", Value: "default", EnvVars: envFor("clickhouse-user"),
			Usage: "ClickHouse user (the password comes from HUNT_RUNNER_CLICKHOUSE_PASSWORD or --clickhouse-password-file)"},
		&cli.StringFlag{Name: "clickhouse-password-file", EnvVars: envFor("clickhouse-password-file"),
			Usage: "file holding the ClickHouse password (trailing newline ignored)"},
		&cli.StringFlag{Name: "clickhouse-ca-file", EnvVars: envFor("clickhouse-ca-file"),
			Usage: "PEM CA bundle to verify the server's TLS certificate"},
		&cli.BoolFlag{Name: "clickhouse-insecure-skip-verify", EnvVars: envFor("clickhouse-insecure-skip-verify"),
			Usage: "do not verify the server's TLS certificate (testing only; logged as a warning)"},
		&cli.StringFlag{Name: "consistency", Value: string(chstore.ConsistencyAuto), EnvVars: envFor("consistency"),
			Usage: "how coordination statements stay consistent across replicas: auto (from the tables' engines), " +
				"single-endpoint, quorum (Replicated*MergeTree) or sequential (SharedMergeTree, Cloud); see docs/operations.md"},
		durationFlag(&cli.DurationFlag{Name: "clickhouse-connect-timeout", Value: connectTimeout, EnvVars: envFor("clickhouse-connect-timeout"),
			Usage: "how long to keep retrying the first connection before giving up"}),
	}
}

// interactiveConnectTimeout bounds how long a command a person (or a CI job) waits for an
// unreachable ClickHouse: a few seconds say "it is down" as well as thirty. run and shim keep
// clickhouseFlags' longer default, because servers and runners start in any order.
const interactiveConnectTimeout = 5 * time.Second

// interactiveClickhouseFlags are clickhouseFlags with the short connect timeout.
func interactiveClickhouseFlags() []cli.Flag { return clickhouseFlagsWith(interactiveConnectTimeout) }

// spreadFlag is given to every command that computes phase offsets; all must agree. A new one
// each time, as logLevelFlag.
func spreadFlag() cli.Flag {
	return &cli.Float64Flag{Name: "spread-fraction", Value: 0.8, EnvVars: envFor("spread-fraction"),
		Usage: "phase offsets spread over this fraction of each interval, in (0, 1]; every command must use the same value"}
}

// sourceFlags select where hunt definitions come from: a directory or a git repository.
func sourceFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "hunts-dir", EnvVars: envFor("hunts-dir"),
			Usage: "directory of hunt files (*.yaml, *.yml, recursive), e.g. a ConfigMap or git-sync volume"},
		&cli.StringFlag{Name: "git-url", EnvVars: envFor("git-url"),
			Usage: "git repository to clone hunts from (https://, ssh:// or file://) instead of --hunts-dir"},
		&cli.StringFlag{Name: "git-ref", Value: "main", EnvVars: envFor("git-ref"),
			Usage: "branch, tag or commit to check out"},
		&cli.StringFlag{Name: "git-path", Value: ".", EnvVars: envFor("git-path"),
			Usage: "directory inside the repository that holds the hunts"},
		&cli.StringFlag{Name: "git-token-file", EnvVars: envFor("git-token-file"),
			Usage: "file holding an HTTPS access token"},
		&cli.StringFlag{Name: "git-ssh-key-file", EnvVars: envFor("git-ssh-key-file"),
			Usage: "file holding an SSH private key"},
		&cli.StringFlag{Name: "git-known-hosts-file", EnvVars: envFor("git-known-hosts-file"),
			Usage: "known_hosts file used to verify the SSH server"},
		&cli.StringFlag{Name: "git-cache-dir", EnvVars: envFor("git-cache-dir"),
			Usage: "where the clone is kept (default: a directory under the user cache dir)"},
		durationFlag(&cli.DurationFlag{Name: "reload-interval", Value: 30 * time.Second, EnvVars: envFor("reload-interval"),
			Usage: "how often hunt definitions are re-read (directory) or fetched (git)"}),
		spreadFlag(),
	}, policyFlags()...)
}

// statusAuthFlags protect the status page and API that run and dev serve on --listen.
func statusAuthFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "status-token-file", EnvVars: envFor("status-token-file"),
			Usage: "file holding a bearer token that the status page (/, /hunts/…) and API (/api/v1/…) then require; /metrics and the probes stay open"},
		&cli.BoolFlag{Name: "status-unauthenticated", EnvVars: envFor("status-unauthenticated"),
			Usage: "serve the status page and API without a token on an address beyond loopback (they show run errors, which can quote row values)"},
		&cli.StringFlag{Name: "clickhouse-web-url", EnvVars: envFor("clickhouse-web-url"),
			Usage: "a ClickHouse web client (e.g. https://ch.example.com:8443/play) a hunt's page links its latest findings' query to; no credentials in it"},
		&cli.StringFlag{Name: "git-commit-url", EnvVars: envFor("git-commit-url"),
			Usage: "prefix a git commit id is appended to, linking a finding's revision to its commit (e.g. https://github.com/org/hunts/commit/)"},
	}
}

// statusLinks are the status page's links out (--clickhouse-web-url, --git-commit-url).
type statusLinks struct{ clickhouseWeb, commit string }

// readStatusLinks checks the links: absolute http(s) URLs without credentials, since the page
// shows them to everyone who may read it.
func readStatusLinks(c *cli.Context) (statusLinks, error) {
	l := statusLinks{clickhouseWeb: c.String("clickhouse-web-url"), commit: c.String("git-commit-url")}
	for flag, v := range map[string]string{"clickhouse-web-url": l.clickhouseWeb, "git-commit-url": l.commit} {
		if v == "" {
			continue
		}
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return statusLinks{}, cli.Exit(fmt.Sprintf("--%s must be an absolute http:// or https:// URL", flag), exitUsage)
		}
		if u.User != nil || u.Query().Has("password") {
			return statusLinks{}, cli.Exit(fmt.Sprintf("--%s must not carry credentials: the status page shows it to every reader", flag), exitUsage)
		}
	}
	return l, nil
}

// statusToken reads --status-token-file. Without a token, a --listen beyond loopback is
// refused unless --status-unauthenticated says the operator means it: run errors on the page
// can quote row values.
func statusToken(c *cli.Context, listen string) (string, error) {
	if path := c.String("status-token-file"); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", cli.Exit(fmt.Sprintf("--status-token-file: %v", err), exitUsage)
		}
		token := strings.TrimSpace(string(b))
		if token == "" {
			return "", cli.Exit(fmt.Sprintf("--status-token-file %s is empty", path), exitUsage)
		}
		return token, nil
	}
	if !loopback(listen) && !c.Bool("status-unauthenticated") {
		return "", cli.Exit(fmt.Sprintf("--listen %s is reachable beyond loopback, and the status page and API it serves show run errors, "+
			"which can quote row values: give --status-token-file (a bearer token, as the shim's --token-file), listen on 127.0.0.1, "+
			"or pass --status-unauthenticated to serve them without a token", listen), exitUsage)
	}
	return "", nil
}

// loopback says whether addr (host:port) only accepts connections from this machine.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func concat(groups ...[]cli.Flag) []cli.Flag {
	var out []cli.Flag
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}
