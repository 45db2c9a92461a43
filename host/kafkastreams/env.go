package kafkastreams

import (
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ksrunner/ksrunner/host"
)

// envPrefix is the prefix of ksrunner's environment variables.
const envPrefix = "KSRUNNER_"

// serverOnlyOptions are the options of `ksrunner jobserver` that are not
// job options: an in-process job server has no use for them (but
// status_port: KSRUNNER_STATUS_PORT, see statusPort), and their variables
// are not misspellings either.
var serverOnlyOptions = []string{"config", "job_host", "job_port", "expansion_port", "log_level", "status_port", "endpoint"}

// serverDefaults are the in-process job server's defaults: ksrunner's,
// overridden by the KSRUNNER_* variables of job options in environ. A
// variable whose name is a likely misspelling of an option's is an error
// naming it; other KSRUNNER_* variables (tools', tests') are not options.
func serverDefaults(environ []string) (host.Options, error) {
	opts := host.DefaultOptions()
	v := reflect.ValueOf(&opts).Elem()
	fields := map[string]reflect.Value{}
	var names []string
	for i := range v.NumField() {
		if name := v.Type().Field(i).Tag.Get("koanf"); name != "" {
			fields[name] = v.Field(i)
			names = append(names, name)
		}
	}
	known := append(append([]string(nil), names...), serverOnlyOptions...)
	sort.Strings(environ)
	for _, kv := range environ {
		k, val, _ := strings.Cut(kv, "=")
		rest, ok := strings.CutPrefix(k, envPrefix)
		if !ok {
			continue
		}
		name := strings.ToLower(rest)
		f, isOption := fields[name]
		if !isOption {
			if s := host.SuggestOption(name, known, 2); s != "" {
				return opts, fmt.Errorf("environment variable %s is not a ksrunner option: did you mean %s%s?", k, envPrefix, strings.ToUpper(s))
			}
			continue
		}
		if err := setField(f, val); err != nil {
			return opts, fmt.Errorf("environment variable %s=%q: %v", k, val, err)
		}
	}
	if err := opts.Validate(); err != nil {
		return opts, fmt.Errorf("in-process job server (defaults, KSRUNNER_* environment): %w", err)
	}
	return opts, nil
}

// setField parses val into an option's field.
func setField(f reflect.Value, val string) error {
	switch f.Interface().(type) {
	case string:
		f.SetString(val)
	case int:
		n, err := strconv.Atoi(strings.TrimSpace(val))
		if err != nil {
			return fmt.Errorf("not an integer")
		}
		f.SetInt(int64(n))
	case bool:
		b, err := strconv.ParseBool(strings.TrimSpace(val))
		if err != nil {
			return fmt.Errorf("not a boolean")
		}
		f.SetBool(b)
	case time.Duration:
		d, err := time.ParseDuration(strings.TrimSpace(val))
		if err != nil {
			return fmt.Errorf("not a duration (e.g. 30s, 5m)")
		}
		f.SetInt(int64(d))
	case []string:
		var l []string
		for _, e := range strings.Split(val, ",") {
			if e = strings.TrimSpace(e); e != "" {
				l = append(l, e)
			}
		}
		f.Set(reflect.ValueOf(l))
	default:
		return fmt.Errorf("option of type %s cannot be set from the environment", f.Type())
	}
	return nil
}

// defaultStatusPort is the in-process job server's status page port when
// KSRUNNER_STATUS_PORT is not set: `ksrunner jobserver`'s, so that the page
// is where the README says. Taken, the page goes to a free port (see
// startInProcess); a variable for tests.
var defaultStatusPort = 8074

// statusPort is the in-process job server's status page port: the
// KSRUNNER_STATUS_PORT variable (explicit: a port in use is then an
// error), 0 for none, or defaultStatusPort.
func statusPort(lookup func(string) (string, bool)) (port int, explicit bool, err error) {
	v, ok := lookup(envPrefix + "STATUS_PORT")
	if !ok || strings.TrimSpace(v) == "" {
		return defaultStatusPort, false, nil
	}
	port, err = strconv.Atoi(strings.TrimSpace(v))
	if err != nil || port < 0 || port > 65535 {
		return 0, true, fmt.Errorf("environment variable %sSTATUS_PORT=%q: want a port, or 0 for no status page", envPrefix, v)
	}
	return port, true, nil
}

// serverLogLevel is the in-process job server's log level: KSRUNNER_DEBUG
// set means debug, else KSRUNNER_LOG_LEVEL, else warn (what the terminal
// needs beyond the job's messages).
func serverLogLevel(lookup func(string) (string, bool)) (slog.Level, error) {
	if v, ok := lookup(envPrefix + "DEBUG"); ok && v != "" {
		return slog.LevelDebug, nil
	}
	lvl := slog.LevelWarn
	if v, ok := lookup(envPrefix + "LOG_LEVEL"); ok && v != "" {
		if err := lvl.UnmarshalText([]byte(v)); err != nil {
			return lvl, fmt.Errorf("environment variable %sLOG_LEVEL=%q: want debug, info, warn or error", envPrefix, v)
		}
	}
	return lvl, nil
}
