package main

import (
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

// envFor derives the environment variable of a flag: --clickhouse-url → HUNT_RUNNER_CLICKHOUSE_URL.
func envFor(name string) []string {
	return []string{"HUNT_RUNNER_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))}
}

var logLevelFlag = &cli.StringFlag{Name: "log-level", Value: "info", EnvVars: envFor("log-level"),
	Usage: "log level: debug, info, warn or error"}

// clickhouseFlags are shared by every command that talks to ClickHouse.
func clickhouseFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "clickhouse-url", Value: "clickhouse://localhost:9000", EnvVars: envFor("clickhouse-url"),
			Usage: "ClickHouse address: clickhouse://host:9000 (native) or http(s)://host:8123; a password in it is refused (use HUNT_RUNNER_CLICKHOUSE_PASSWORD or --clickhouse-password-file)"},
		&cli.StringFlag{Name: "database", Value: "hunt_runner", EnvVars: envFor("database"),
			Usage: "database holding hunt-runner's coordination tables"},
		&cli.StringFlag{Name: "clickhouse-user", Value: "default", EnvVars: envFor("clickhouse-user"),
			Usage: "ClickHouse user (the password comes from HUNT_RUNNER_CLICKHOUSE_PASSWORD or --clickhouse-password-file)"},
		&cli.StringFlag{Name: "clickhouse-password-file", EnvVars: envFor("clickhouse-password-file"),
			Usage: "file holding the ClickHouse password (trailing newline ignored)"},
		&cli.StringFlag{Name: "clickhouse-ca-file", EnvVars: envFor("clickhouse-ca-file"),
			Usage: "PEM CA bundle to verify the server's TLS certificate"},
		&cli.BoolFlag{Name: "clickhouse-insecure-skip-verify", EnvVars: envFor("clickhouse-insecure-skip-verify"),
			Usage: "do not verify the server's TLS certificate (testing only; logged as a warning)"},
		&cli.DurationFlag{Name: "clickhouse-connect-timeout", Value: 30 * time.Second, EnvVars: envFor("clickhouse-connect-timeout"),
			Usage: "how long to keep retrying the first connection before giving up"},
	}
}

// spreadFlag is shared by every command that computes phase offsets; all must agree.
var spreadFlag = &cli.Float64Flag{Name: "spread-fraction", Value: 0.8, EnvVars: envFor("spread-fraction"),
	Usage: "phase offsets spread over this fraction of each interval, in (0, 1]; every command must use the same value"}

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
		spreadFlag,
	}, policyFlags()...)
}

func concat(groups ...[]cli.Flag) []cli.Flag {
	var out []cli.Flag
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}
