package main

import (
	"fmt"
	"log/slog"
	"path"
	"path/filepath"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/configsrc"
)

// huntSource builds the hunt source selected by sourceFlags(): --hunts-dir or --git-url.
// A directory source waits configsrc.DefaultSettle before trusting a freshly changed file.
// errNoHuntSource is returned when neither --hunts-dir nor --git-url is given.
var errNoHuntSource = cli.Exit("no hunt source: give --hunts-dir DIR or --git-url URL", exitUsage)

func huntSource(c *cli.Context, log *slog.Logger) (configsrc.Source, error) {
	return huntSourceWith(c, log, c.String("hunts-dir"), 0)
}

// loadHunts reads the hunt set once from the source flags. A source that cannot be read ends
// a command that writes from it before anything is written.
func loadHunts(c *cli.Context, log *slog.Logger) (configsrc.Source, *configsrc.Set, error) {
	src, err := huntSource(c, log)
	if err != nil {
		return nil, nil, err
	}
	set, err := src.Load(c.Context)
	if err != nil {
		return src, nil, cli.Exit(fmt.Sprintf("read hunts from %s: %v; nothing written", src, err), exitError)
	}
	return src, set, nil
}

// huntSourceWith is huntSource with the directory given explicitly (validate's DIR argument
// overrides both flags) and the directory settle time (negative: trust files at once).
func huntSourceWith(c *cli.Context, log *slog.Logger, dir string, settle time.Duration) (configsrc.Source, error) {
	f := c.Float64("spread-fraction")
	policy, err := huntPolicy(c)
	if err != nil {
		return nil, err
	}
	url := c.String("git-url")
	var src configsrc.Source
	switch {
	case dir != "" && url != "" && !c.Args().Present():
		return nil, cli.Exit("give either --hunts-dir or --git-url, not both", exitUsage)
	case dir != "":
		src, err = configsrc.NewDir(dir, configsrc.Options{SpreadFraction: f, Settle: settle, Policy: policy})
	case url != "":
		src, err = configsrc.NewGit(configsrc.GitOptions{
			URL: url, Ref: c.String("git-ref"), Path: c.String("git-path"), CacheDir: c.String("git-cache-dir"),
			TokenFile: c.String("git-token-file"), SSHKeyFile: c.String("git-ssh-key-file"),
			KnownHostsFile: c.String("git-known-hosts-file"), SpreadFraction: f, Policy: policy,
		})
	default:
		return nil, errNoHuntSource
	}
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("hunt source: %v", err), exitUsage)
	}
	log.Debug("hunt source", "source", src.String())
	return src, nil
}

// sourcePath shows a file of a loaded set (its path relative to the source root) the way the
// author finds it: under dir, or under --git-path in the repository when dir is "".
func sourcePath(c *cli.Context, dir string) func(rel string) string {
	if dir != "" {
		return func(rel string) string { return filepath.Join(dir, filepath.FromSlash(rel)) }
	}
	root := c.String("git-path")
	return func(rel string) string { return path.Join(root, rel) }
}

// policyFlags say what hunt queries may use beyond plain table reads. Every command that loads
// hunts takes them (through sourceFlags), so validate, materialise and run judge alike.
func policyFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "allow-table-functions", EnvVars: envFor("allow-table-functions"),
			Usage: "comma-separated table functions hunts may call beyond numbers and generate_series with literal bounds (e.g. merge; its databases are still checked)"},
		&cli.StringFlag{Name: "allow-functions", EnvVars: envFor("allow-functions"),
			Usage: "comma-separated functions hunts may call beyond the default allowlist (docs/hunts.md), e.g. throwIf"},
		&cli.StringFlag{Name: "allow-dictionaries", EnvVars: envFor("allow-dictionaries"),
			Usage: "comma-separated dictionaries (db.name, as written in dictGet) hunts may read; none by default"},
		&cli.BoolFlag{Name: "allow-system-tables", EnvVars: envFor("allow-system-tables"),
			Usage: "let hunts read system.* and information_schema (they hold other users' queries and server state)"},
		&cli.BoolFlag{Name: "allow-permanent-exceptions", EnvVars: envFor("allow-permanent-exceptions"),
			Usage: "let a hunt's exceptions omit until: (by default every exception expires)"},
		&cli.Uint64Flag{Name: "max-rows-read-default", EnvVars: envFor("max-rows-read-default"), Value: configsrc.MaxRowsReadDefault,
			Usage: "read budget in rows (max_rows_to_read on the server) of a hunt that sets no max_rows_read; 0: none"},
		&cli.Uint64Flag{Name: "max-rows-read-ceiling", EnvVars: envFor("max-rows-read-ceiling"), Value: configsrc.MaxRowsReadCeiling,
			Usage: "the most max_rows_read a hunt may ask for; validate refuses more. 0: no ceiling"},
		&cli.StringFlag{Name: "max-bytes-read-default", EnvVars: envFor("max-bytes-read-default"), Value: strconv.FormatUint(configsrc.MaxBytesReadDefault, 10),
			Usage: "read budget in bytes (e.g. 10GiB; max_bytes_to_read on the server) of a hunt that sets no max_bytes_read; 0: none"},
		&cli.StringFlag{Name: "max-bytes-read-ceiling", EnvVars: envFor("max-bytes-read-ceiling"), Value: strconv.FormatUint(configsrc.MaxBytesReadCeiling, 10),
			Usage: "the most max_bytes_read (e.g. 100GiB) a hunt may ask for; validate refuses more. 0: no ceiling"},
	}
}

// readBudget reads the budget flags of policyFlags.
func readBudget(c *cli.Context) (configsrc.Budget, error) {
	b := configsrc.Budget{MaxRowsReadDefault: c.Uint64("max-rows-read-default"), MaxRowsReadCeiling: c.Uint64("max-rows-read-ceiling"),
		MaxBytesReadDefault: configsrc.MaxBytesReadDefault, MaxBytesReadCeiling: configsrc.MaxBytesReadCeiling}
	for _, f := range []struct {
		flag string
		to   *uint64
	}{{"max-bytes-read-default", &b.MaxBytesReadDefault}, {"max-bytes-read-ceiling", &b.MaxBytesReadCeiling}} {
		if v := c.String(f.flag); v != "" && v != "0" {
			n, err := configsrc.ParseBytes(v)
			if err != nil {
				return b, cli.Exit(fmt.Sprintf("--%s: %v", f.flag, err), exitUsage)
			}
			*f.to = n
		}
	}
	if err := b.Check(); err != nil {
		return b, cli.Exit(fmt.Sprintf("read budget flags: %v", err), exitUsage)
	}
	return b, nil
}

// huntPolicy reads policyFlags(); the coordination database is the one the ClickHouse flags
// name, so a hunt can never read hunt-runner's own tables.
func huntPolicy(c *cli.Context) (configsrc.Policy, error) {
	fns, err := configsrc.ParseTableFunctions(c.String("allow-table-functions"))
	if err != nil {
		return configsrc.Policy{}, cli.Exit(fmt.Sprintf("--allow-table-functions: %v", err), exitUsage)
	}
	extra, err := configsrc.ParseFunctions(c.String("allow-functions"))
	if err != nil {
		return configsrc.Policy{}, cli.Exit(fmt.Sprintf("--allow-functions: %v", err), exitUsage)
	}
	dicts, err := configsrc.ParseDictionaries(c.String("allow-dictionaries"))
	if err != nil {
		return configsrc.Policy{}, cli.Exit(fmt.Sprintf("--allow-dictionaries: %v", err), exitUsage)
	}
	budget, err := readBudget(c)
	if err != nil {
		return configsrc.Policy{}, err
	}
	p := configsrc.Policy{AllowTableFunctions: fns, AllowFunctions: extra, AllowDictionaries: dicts,
		AllowSystem: c.Bool("allow-system-tables"), CoordinationDatabase: chstore.DefaultDatabase, Budget: budget,
		AllowPermanentExceptions: c.Bool("allow-permanent-exceptions")}
	if o, err := clickhouseOptions(c).WithDefaults(); err == nil {
		p.CoordinationDatabase = o.Database
	}
	return p, nil
}
