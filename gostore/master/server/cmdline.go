// cmdline.go reads a command line the way gflags (Mooncake's flag library)
// does, so that Mooncake's launch scripts carry over unchanged.

package server

import (
	"fmt"
	"os"
	"strings"
)

// setting is one value given to a flag, and where it was given (for errors).
type setting struct {
	spec  *flagSpec
	value string
	from  string
}

// cmdline gathers the settings of a command line: --name=value or
// -name=value; --name value (not for booleans); --name and --noname for
// booleans; dashes in names read as underscores; "--" ends the flags.
// gflags' own flags act as they are met: --flagfile and --fromenv insert
// their settings there, later ones win.
type cmdline struct {
	settings []setting
	unknown  []string // flag names nobody defines, in order
	undefok  map[string]bool
	stray    []string // arguments that are no flag
	help     bool
	version  bool
	files    int // flagfiles read, against files that include each other
}

// maxFlagfiles bounds flagfiles including flagfiles.
const maxFlagfiles = 64

func (c *cmdline) parse(args []string, from string) error {
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			c.stray = append(c.stray, args[i+1:]...)
			return nil
		}
		if len(arg) < 2 || arg[0] != '-' {
			c.stray = append(c.stray, arg)
			continue
		}
		raw, value, hasValue := strings.Cut(strings.TrimPrefix(arg[1:], "-"), "=")
		spec, negated, err := lookup(raw)
		switch {
		case err != nil:
			return fmt.Errorf("%s: %v", from, err)
		case spec == nil:
			c.unknown = append(c.unknown, raw)
			continue
		case negated && hasValue:
			return fmt.Errorf("%s: --%s takes no value (--%s=false says the same)", from, raw, spec.name)
		case negated:
			value = "false"
		case spec.gtype == "bool" && !hasValue:
			value = "true"
		case !hasValue && i+1 == len(args):
			return fmt.Errorf("%s: flag --%s is missing its value", from, raw)
		case !hasValue:
			i++
			value = args[i]
		}
		if err := c.add(spec, value, from); err != nil {
			return err
		}
	}
	return nil
}

// lookup finds the flag an argument names: its own, or a boolean's
// negation (--noname).
func lookup(raw string) (spec *flagSpec, negated bool, err error) {
	name := strings.ReplaceAll(raw, "-", "_")
	if f := specByName[name]; f != nil {
		return f, false, nil
	}
	rest, ok := strings.CutPrefix(name, "no")
	f := specByName[rest]
	switch {
	case !ok || f == nil:
		return nil, false, nil
	case f.gtype != "bool":
		return nil, false, fmt.Errorf("--%s: --%s is not a boolean", raw, f.name)
	}
	return f, true, nil
}

// add records a setting, or acts on it for gflags' own flags.
func (c *cmdline) add(f *flagSpec, value, from string) error {
	if !f.special {
		c.settings = append(c.settings, setting{f, value, from})
		return nil
	}
	v, err := f.canonical(value)
	if err != nil {
		return fmt.Errorf("%s: --%s: %v", from, f.name, err)
	}
	switch f.name {
	case "flagfile":
		for _, path := range list(v) {
			if err := c.flagfile(path); err != nil {
				return err
			}
		}
	case "fromenv", "tryfromenv":
		return c.fromEnv(list(v), f.name == "tryfromenv", from)
	case "undefok":
		if c.undefok == nil {
			c.undefok = map[string]bool{}
		}
		for _, name := range list(v) {
			c.undefok[name] = true
		}
	case "version":
		c.version = c.version || v == "true"
	default: // the help family: booleans, or a module name to help on
		c.help = c.help || (v != "false" && v != "")
	}
	return nil
}

// list splits gflags' comma-separated lists.
func list(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// flagfile reads one flag per line; blank lines and lines starting with #
// are skipped. gflags also takes lines naming programs the following flags
// apply to: those are refused rather than guessed at.
func (c *cmdline) flagfile(path string) error {
	if c.files++; c.files > maxFlagfiles {
		return fmt.Errorf("--flagfile: more than %d flagfiles (do they include each other?)", maxFlagfiles)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--flagfile: %v", err)
	}
	var args []string
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || line[0] == '#':
			continue
		case line[0] != '-':
			return fmt.Errorf("flagfile %s line %d: %q is not a flag (only --name=value lines are supported)", path, n+1, line)
		}
		args = append(args, line)
	}
	return c.parse(args, "flagfile "+path)
}

// fromEnv reads FLAGS_name for each name; with try, a missing variable is
// skipped instead of being an error.
func (c *cmdline) fromEnv(names []string, try bool, from string) error {
	for _, name := range names {
		f := specByName[name]
		if f == nil || f.special {
			return fmt.Errorf("%s: --fromenv names %q, which is no flag it can set", from, name)
		}
		v, ok := os.LookupEnv("FLAGS_" + name)
		if !ok && try {
			continue
		}
		if !ok {
			return fmt.Errorf("%s: --fromenv: FLAGS_%s is not set", from, name)
		}
		c.settings = append(c.settings, setting{f, v, "FLAGS_" + name})
	}
	return nil
}

// leftovers refuses unknown flags (but those --undefok names) and
// arguments that are no flag. gflags ignores the latter; here they are
// refused because "--enable_offload false" would otherwise quietly mean
// true.
func (c *cmdline) leftovers() error {
	var unknown []string
	for _, name := range c.unknown {
		if !c.undefok[name] {
			unknown = append(unknown, "--"+name)
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("unknown flag %s: neither gostore's nor Mooncake 0.3.13 master's (--help lists them)", strings.Join(unknown, ", "))
	}
	if len(c.stray) > 0 {
		return fmt.Errorf("unexpected argument %q: flags are --name=value, and booleans take theirs only after = (--enable_offload=false)", c.stray[0])
	}
	return nil
}

// last is the value last given to the flag name, or "".
func (c *cmdline) last(name string) string {
	for i := len(c.settings) - 1; i >= 0; i-- {
		if c.settings[i].spec.name == name {
			return c.settings[i].value
		}
	}
	return ""
}
