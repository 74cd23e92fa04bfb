package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"
)

// interspersedArgs returns the positional arguments of c and applies flags that follow them.
// urfave/cli stops parsing flags at the first positional argument, so without this
// `trigger HUNT --fire T` would take "--fire" as a second hunt id.
func interspersedArgs(c *cli.Context) ([]string, error) {
	args := c.Args().Slice()
	fs := flag.NewFlagSet(c.Command.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, f := range c.Command.Flags {
		if err := f.Apply(fs); err != nil {
			return nil, err
		}
	}
	var pos []string
	for len(args) > 0 {
		if args[0] == "--" {
			pos = append(pos, args[1:]...)
			break
		}
		if !strings.HasPrefix(args[0], "-") || args[0] == "-" {
			pos, args = append(pos, args[0]), args[1:]
			continue
		}
		if err := fs.Parse(args); err != nil {
			return nil, cli.Exit(fmt.Sprintf("%s: %v", c.Command.Name, err), exitUsage)
		}
		args = fs.Args()
	}
	var err error
	fs.Visit(func(f *flag.Flag) {
		if e := c.Set(f.Name, f.Value.String()); e != nil && err == nil {
			err = cli.Exit(fmt.Sprintf("%s: --%s: %v", c.Command.Name, f.Name, e), exitUsage)
		}
	})
	return pos, err
}
