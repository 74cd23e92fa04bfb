package main

import (
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/schedule"
)

// huntSetFlag names the hunt set a command publishes, runs or shows (docs/schedule.md, "Hunt
// sets"). A new one each time, as logLevelFlag.
func huntSetFlag() cli.Flag {
	return &cli.StringFlag{Name: "hunt-set", Value: schedule.DefaultHuntSet, EnvVars: envFor("hunt-set"),
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

// envFor derives the environment variable of a flag: --clickhouse-url → HUNT_RUNNER_CLICKHOUSE_URL.
func envFor(name string) []string {
	return []string{"HUNT_RUNNER_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))}
}

// logLevelFlag is new for every app: urfave/cli stores a value read from the environment in
// the flag itself, so a shared flag would carry one run's HUNT_RUNNER_LOG_LEVEL into the next.
func logLevelFlag() cli.Flag {
	return &cli.StringFlag{Name: "log-level", Value: "info", EnvVars: envFor("log-level"),
		Usage: "log level: debug, info, warn or error"}
}

// clickhouseFlags are shared by every command that talks to ClickHouse.
func clickhouseFlags() []cli.Flag {
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
		&cli.DurationFlag{Name: "clickhouse-connect-timeout", Value: 30 * time.Second, EnvVars: envFor("clickhouse-connect-timeout"),
			Usage: "how long to keep retrying the first connection before giving up"},
	}
}

// interactiveConnectTimeout bounds how long a command a person (or a CI job) waits for an
// unreachable ClickHouse: a few seconds say "it is down" as well as thirty. run and shim keep
// clickhouseFlags' longer default, because servers and runners start in any order.
const interactiveConnectTimeout = 5 * time.Second

// interactiveClickhouseFlags are clickhouseFlags with the short connect timeout.
func interactiveClickhouseFlags() []cli.Flag {
	flags := clickhouseFlags()
	for i, f := range flags {
		if d, ok := f.(*cli.DurationFlag); ok && d.Name == "clickhouse-connect-timeout" {
			short := *d
			short.Value = interactiveConnectTimeout
			flags[i] = &short
		}
	}
	return flags
}

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
		&cli.DurationFlag{Name: "reload-interval", Value: 30 * time.Second, EnvVars: envFor("reload-interval"),
			Usage: "how often hunt definitions are re-read (directory) or fetched (git)"},
		spreadFlag(),
	}, policyFlags()...)
}

func concat(groups ...[]cli.Flag) []cli.Flag {
	var out []cli.Flag
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}
