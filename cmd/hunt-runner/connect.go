package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/internal/attrib"
)

// passwordEnv is the only place a ClickHouse password is read from besides a file: a flag would
// show it in `ps` and shell history. huntsPasswordEnv is the same for the hunts identity.
const (
	passwordEnv      = "HUNT_RUNNER_CLICKHOUSE_PASSWORD"
	huntsPasswordEnv = "HUNT_RUNNER_HUNTS_PASSWORD"
)

// newLogger builds the process logger from the global --log-level, writing to stderr: JSON, or
// text when HUNT_RUNNER_LOG_FORMAT=text or, with that unset, when stderr is a terminal.
func newLogger(c *cli.Context) *slog.Logger {
	format := os.Getenv("HUNT_RUNNER_LOG_FORMAT")
	if format == "" {
		if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			format = "text"
		}
	}
	return buildLogger(logWriter(c), lookupString(c, "log-level"), format)
}

func buildLogger(w io.Writer, level, format string) *slog.Logger {
	var lvl slog.Level
	bad := lvl.UnmarshalText([]byte(level)) != nil
	opts := &slog.HandlerOptions{Level: lvl, ReplaceAttr: readableTimes}
	var log *slog.Logger
	if strings.EqualFold(format, "text") {
		log = slog.New(slog.NewTextHandler(w, opts))
	} else {
		log = slog.New(slog.NewJSONHandler(w, opts))
	}
	if bad {
		log.Warn("unknown --log-level; using info", "log_level", level)
	}
	return log
}

// lookupString reads a flag from this command or any parent (the global flags live on the app).
func lookupString(c *cli.Context, name string) string {
	for _, ctx := range c.Lineage() {
		if ctx.IsSet(name) {
			return ctx.String(name)
		}
	}
	return c.String(name)
}

// clickhouseOptions turns the clickhouseFlags() values into chstore.Options. Flags left at their
// defaults do not override what the URL says (its path names the database, its user the user).
func clickhouseOptions(c *cli.Context) chstore.Options {
	o := chstore.Options{
		URL:            c.String("clickhouse-url"),
		Password:       os.Getenv(passwordEnv),
		PasswordFile:   c.String("clickhouse-password-file"),
		TLSCAFile:      c.String("clickhouse-ca-file"),
		TLSSkipVerify:  c.Bool("clickhouse-insecure-skip-verify"),
		ConnectTimeout: c.Duration("clickhouse-connect-timeout"),
		Consistency:    chstore.Consistency(c.String("consistency")),
		LogComment:     attrib.CoordinationComment(runnerID(c)),
	}
	if ep, err := chstore.ParseURL(o.URL); c.IsSet("database") || err != nil || ep.Database == "" {
		o.Database = c.String("database")
	}
	if ep, err := chstore.ParseURL(o.URL); c.IsSet("clickhouse-user") || err != nil || ep.User == "" {
		o.User = c.String("clickhouse-user")
	}
	return o
}

// runnerID names this process in the log_comment of its statements: run's --owner, else the
// host name.
func runnerID(c *cli.Context) string {
	return cmp.Or(lookupString(c, "owner"), attrib.Host())
}

// daemons log the consistency mode they chose at info; interactive commands at debug.
var daemons = map[string]bool{"run": true, "shim": true, "dev": true}

// openClickHouse connects with the shared ClickHouse flags. The returned Options have their
// defaults filled (Database is the coordination database to use) and a redacting String.
func openClickHouse(c *cli.Context, log *slog.Logger) (driver.Conn, chstore.Options, error) {
	return openWith(c, clickhouseOptions(c), log)
}

func openWith(c *cli.Context, o chstore.Options, log *slog.Logger) (driver.Conn, chstore.Options, error) {
	o, err := o.WithDefaults()
	if err != nil {
		return nil, o, cli.Exit(fmt.Sprintf("ClickHouse settings: %v", err), exitUsage)
	}
	if !daemons[c.Command.Name] {
		o.ConsistencyLogLevel = slog.LevelDebug
	}
	conn, rep, err := chstore.OpenConsistent(c.Context, o, log)
	if errors.Is(err, chstore.ErrConsistency) {
		return nil, o, cli.Exit(err.Error(), exitUsage)
	}
	var ce *chstore.ConnectError
	if errors.As(err, &ce) && (ce.Kind == chstore.ErrRefused || ce.Kind == chstore.ErrDNS || ce.Kind == chstore.ErrTimeout) {
		return nil, o, fmt.Errorf("%w (tried for %s; the address is --clickhouse-url or HUNT_RUNNER_CLICKHOUSE_URL, "+
			"--clickhouse-connect-timeout waits longer)", err, o.ConnectTimeout)
	}
	if err != nil {
		return nil, o, err
	}
	o.Consistency = rep.Mode // resolved: what the connection's statements carry
	return conn, o, nil
}

// huntsFlags name the identity hunt queries run as (provision --role hunts): it may read the
// source databases and nothing else, so a hunt can neither write nor read hunt-runner's tables.
func huntsFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "hunts-user", EnvVars: envFor("hunts-user"),
			Usage: "ClickHouse user hunt queries run as (provision --role hunts); its password comes from " + huntsPasswordEnv + " or --hunts-password-file. Default: the main connection's user"},
		&cli.StringFlag{Name: "hunts-password-file", EnvVars: envFor("hunts-password-file"),
			Usage: "file holding the hunts user's password (trailing newline ignored)"},
	}
}

// huntsOptions are the main connection's options with the hunts identity, or ok=false when
// --hunts-user is not set. The coordination database is not checked: the hunts user cannot see
// it, by design.
func huntsOptions(c *cli.Context) (o chstore.Options, ok bool) {
	user := lookupString(c, "hunts-user")
	if user == "" {
		return o, false
	}
	o = clickhouseOptions(c)
	o.User = user
	o.Password = os.Getenv(huntsPasswordEnv)
	o.PasswordFile = lookupString(c, "hunts-password-file")
	o.AllowMissingDatabase = true
	o.LogComment = "" // every statement sent as the hunts identity carries its own (internal/attrib)
	return o, true
}

// openHuntsClickHouse connects as the hunts identity, or returns nil when --hunts-user is not
// set (hunts then run as the main connection's user).
func openHuntsClickHouse(c *cli.Context, log *slog.Logger) (driver.Conn, error) {
	o, ok := huntsOptions(c)
	if !ok {
		return nil, nil
	}
	if o.Password != "" && o.PasswordFile != "" {
		return nil, cli.Exit("hunts identity: both "+huntsPasswordEnv+" and --hunts-password-file are set; use one", exitUsage)
	}
	// Hunt queries are not coordination statements: no consistency settings on them.
	o.SkipConsistency = true
	o, err := o.WithDefaults()
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("hunts identity: ClickHouse settings: %v", err), exitUsage)
	}
	conn, err := chstore.Open(c.Context, o, log.With("identity", "hunts"))
	if err != nil {
		return nil, fmt.Errorf("hunts identity: %w", err)
	}
	return conn, nil
}
