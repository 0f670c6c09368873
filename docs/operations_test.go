package docs

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/dev/testenv/leaks"
)

func TestMain(m *testing.M) { leaks.Main(m, testenv.CleanupBinaries) }

// docFlag is one row of a flag table of operations.md.
type docFlag struct {
	names []string // without the dashes
	env   string
	def   string // the default column, backticks removed
}

// helpFlag is one flag as a command's --help prints it.
type helpFlag struct {
	def   string // what "(default …)" says; empty when it says nothing
	usage string
}

var (
	flagName    = regexp.MustCompile("`--?([a-z][a-z0-9-]*)`")
	envName     = regexp.MustCompile("`(TOOLBUS_[A-Z_]+)`")
	helpLine    = regexp.MustCompile(`^  -([a-z][a-z0-9-]*)`)
	helpDefault = regexp.MustCompile(`\(default ([^()]*)\)$`)
)

// flagTable returns the rows of the first table after the line that holds
// marker, whose first column names flags.
func flagTable(t *testing.T, doc, marker string) []docFlag {
	t.Helper()
	i := strings.Index(doc, marker)
	if i < 0 {
		t.Fatalf("operations.md has no %q", marker)
	}
	var rows []docFlag
	inTable := false
	header := []string(nil)
	for _, line := range strings.Split(doc[i:], "\n")[1:] {
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for k := range cells {
			cells[k] = strings.TrimSpace(cells[k])
		}
		if !inTable {
			inTable, header = true, cells
			continue
		}
		if strings.HasPrefix(cells[0], "---") {
			continue
		}
		row := docFlag{}
		for _, m := range flagName.FindAllStringSubmatch(cells[0], -1) {
			row.names = append(row.names, m[1])
		}
		if len(row.names) == 0 {
			continue // "connection flags": a pointer to the first table
		}
		if m := envName.FindStringSubmatch(cells[0]); m != nil {
			row.env = m[1]
		}
		for k, h := range header {
			switch h {
			case "environment":
				if m := envName.FindStringSubmatch(cells[k]); m != nil {
					row.env = m[1]
				}
			case "default":
				row.def = strings.Trim(cells[k], "`")
			}
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		t.Fatalf("operations.md has no flag table after %q", marker)
	}
	return rows
}

// help runs a command with --help and the given environment and returns the
// flags it lists.
func help(t *testing.T, bin string, env []string, args ...string) map[string]helpFlag {
	t.Helper()
	cmd := exec.Command(bin, append(args, "--help")...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run() // --help exits 0 or 2 depending on the flag set
	flags := map[string]helpFlag{}
	name := ""
	for _, line := range strings.Split(out.String(), "\n") {
		if m := helpLine.FindStringSubmatch(line); m != nil {
			name = m[1]
			flags[name] = helpFlag{}
			continue
		}
		if name != "" && strings.HasPrefix(line, "    \t") {
			f := flags[name]
			f.usage = strings.TrimSpace(f.usage + " " + strings.TrimSpace(line))
			if m := helpDefault.FindStringSubmatch(f.usage); m != nil {
				f.def = strings.Trim(m[1], `"`)
			}
			flags[name] = f
		}
	}
	if len(flags) == 0 {
		t.Fatalf("%s %v --help lists no flags:\n%s", bin, args, out.String())
	}
	return flags
}

// sameDefault says whether a documented default is what --help shows. A
// default the table describes in words ("the installation's, or 1") is not
// compared.
func sameDefault(doc, shown string) (same, compared bool) {
	switch doc {
	case "none", "off", "":
		return shown == "" || shown == "0" || shown == "0s" || shown == "false", true
	}
	if d, err := time.ParseDuration(doc); err == nil {
		s, err := time.ParseDuration(shown)
		return err == nil && s == d, true
	}
	if n, err := strconv.Atoi(doc); err == nil {
		return shown == strconv.Itoa(n), true
	}
	if size, ok := strings.CutSuffix(doc, " KiB"); ok {
		n, err := strconv.Atoi(size)
		return err == nil && shown == strconv.Itoa(n*1024), true
	}
	if !strings.Contains(doc, " ") {
		return doc == shown, true
	}
	return false, false
}

// TestOperationsFlagTables holds the flag tables of operations.md to the
// commands: every flag a table lists exists with the documented default and
// environment variable, and every flag a command takes is in its table.
func TestOperationsFlagTables(t *testing.T) {
	raw, err := os.ReadFile("operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	connection := flagTable(t, doc, "Every command takes the same connection flags")
	for _, tc := range []struct {
		name       string
		bin        string
		args       []string
		marker     string
		connection bool
	}{
		{"coordinator", "./cmd/coordinator", nil, "`cmd/coordinator` (user", true},
		{"worker", "./cmd/worker", nil, "`cmd/worker` (one user", true},
		{"indexer", "./cmd/indexer", nil, "`cmd/indexer` (user", true},
		{"toolbus console", "./cmd/toolbus", []string{"console"}, "TOOLBUS_USER=operator TOOLBUS_PASSWORD=… toolbus --server nats://n1:4222,nats://n2:4222", false},
		{"toolbus setup", "./cmd/toolbus", []string{"setup"}, "installation knows but cannot read stops it, naming the file.", false},
		{"toolbus up", "./cmd/toolbus", []string{"up"}, "also stopped if `toolbus up` itself is killed.", false},
		{"toolbus authn", "./cmd/toolbus", []string{"authn"}, "(queue group `toolbus-authn`)", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := testenv.Binary(t, tc.bin)
			rows := flagTable(t, doc, tc.marker)
			if tc.connection {
				rows = append(rows, connection...)
			}
			shown := help(t, bin, nil, tc.args...)
			documented := map[string]bool{}
			for _, row := range rows {
				for _, name := range row.names {
					documented[name] = true
					f, ok := shown[name]
					if !ok {
						t.Errorf("operations.md documents --%s, which %s does not take", name, tc.name)
						continue
					}
					if same, compared := sameDefault(row.def, f.def); compared && !same {
						t.Errorf("--%s: operations.md says the default is %q, %s --help says %q", name, row.def, tc.name, f.def)
					}
				}
				// the console reads $TOOLBUS_CONSOLE_TOKENS in another format than its file, not as the flag's default
				if tc.connection && row.env != "" && len(row.names) == 1 {
					const marker = "value-from-the-environment"
					withEnv := help(t, bin, []string{row.env + "=" + marker}, tc.args...)
					if got := withEnv[row.names[0]].def; got != marker {
						t.Errorf("--%s: operations.md says %s is its default; with %s=%s, --help shows the default %q", row.names[0], row.env, row.env, marker, got)
					}
				}
			}
			for name := range shown {
				if !documented[name] {
					t.Errorf("%s takes --%s, which operations.md does not list", tc.name, name)
				}
			}
		})
	}
}

// TestOperatorCommandFlags checks that every flag operations.md shows for a
// command of the operators' command line is one that command takes.
func TestOperatorCommandFlags(t *testing.T) {
	raw, err := os.ReadFile("operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "## The command line for operators")
	if start < 0 {
		t.Fatal("operations.md has no section on the command line for operators")
	}
	section := doc[start:]
	section = section[:strings.Index(section, "\n## ")+1]
	bin := testenv.Binary(t, "./cmd/toolbus")
	command := regexp.MustCompile("`toolbus ([a-z]+(?: (?:list|get|watch|cancel|approve|deny|disable|enable|remove|check|explain))?)((?: [^`]*)?)`")
	checked := 0
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `toolbus ") {
			continue
		}
		first := strings.Split(strings.Trim(line, "|"), "|")[0]
		// a cell may name two commands: "`toolbus calls watch ID`, `toolbus calls cancel [--reason R] ID`"
		for _, m := range command.FindAllStringSubmatch(strings.ReplaceAll(first, `\|`, "|"), -1) {
			flags := regexp.MustCompile(`--([a-z][a-z-]*)`).FindAllStringSubmatch(m[2], -1)
			if len(flags) == 0 {
				continue
			}
			shown := help(t, bin, nil, strings.Fields(m[1])...)
			for _, f := range flags {
				checked++
				if _, ok := shown[f[1]]; !ok {
					t.Errorf("operations.md shows toolbus %s --%s, which the command does not take", m[1], f[1])
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("checked %d flags of the operators' commands; the table was not read", checked)
	}
}

// TestOperationsMetricsTable holds the metrics table of operations.md to
// the instruments of internal/wire/telemetry/metrics: the same names, each of
// the documented kind and unit.
func TestOperationsMetricsTable(t *testing.T) {
	raw, err := os.ReadFile("operations.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("../internal/wire/telemetry/metrics/metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	instrument := regexp.MustCompile(`meter\.(Int64|Float64)(Counter|UpDownCounter|Histogram|Gauge)\("([a-z._]+)",\s*metric\.WithUnit\("([^"]*)"\)`)
	kinds := map[string]string{"Counter": "counter", "UpDownCounter": "up-down counter", "Histogram": "histogram", "Gauge": "gauge"}
	inCode := map[string]string{}
	for _, m := range instrument.FindAllStringSubmatch(string(src), -1) {
		inCode[m[3]] = kinds[m[2]] + " " + m[4]
	}
	if len(inCode) == 0 {
		t.Fatal("no instrument found in metrics.go")
	}
	row := regexp.MustCompile("(?m)^\\| `(toolbus\\.[a-z._]+)` \\| ([a-z -]+) \\| `?([^`|]*?)`? \\|")
	doc := string(raw)
	start, end := strings.Index(doc, "### Metrics"), strings.Index(doc, "### Health")
	if start < 0 || end < start {
		t.Fatal("operations.md has no Metrics section before its Health section")
	}
	inDoc := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(doc[start:end], -1) {
		inDoc[m[1]] = m[2] + " " + m[3]
	}
	for name, want := range inDoc {
		if got, ok := inCode[name]; !ok {
			t.Errorf("operations.md lists the metric %s, which no instrument records", name)
		} else if got != want {
			t.Errorf("%s is a %s in the code, a %s in operations.md", name, got, want)
		}
	}
	for name := range inCode {
		if _, ok := inDoc[name]; !ok {
			t.Errorf("the metric %s is not in operations.md's table", name)
		}
	}
}

// TestReadmeDevFlags checks README.md's "Run it" against toolbus dev: every
// flag it shows is one toolbus dev takes, and the addresses it prints by
// default are the flags' defaults.
func TestReadmeDevFlags(t *testing.T) {
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	start, end := strings.Index(readme, "## Run it"), strings.Index(readme, "### The command line")
	if start < 0 || end < start {
		t.Fatal("README.md has no Run it section before its command line section")
	}
	section := readme[start:end]
	shown := help(t, testenv.Binary(t, "./cmd/toolbus"), nil, "dev")
	flags := regexp.MustCompile("`toolbus dev (?:--[a-z-]+ [A-Z]+ ?)+`|\\(`--[a-z-]+`|`--[a-z-]+ 0`").FindAllString(section, -1)
	if len(flags) < 4 {
		t.Fatalf("found %d mentions of toolbus dev's flags in README.md's Run it: %q", len(flags), flags)
	}
	for _, mention := range flags {
		for _, m := range regexp.MustCompile(`--([a-z-]+)`).FindAllStringSubmatch(mention, -1) {
			if _, ok := shown[m[1]]; !ok {
				t.Errorf("README.md shows toolbus dev --%s, which toolbus dev does not take", m[1])
			}
		}
	}
	for flag, address := range map[string]string{"port": "nats://127.0.0.1:4222", "console-port": "http://127.0.0.1:8090/", "mcp-port": "http://127.0.0.1:8080/mcp"} {
		if !strings.Contains(readme, address) {
			t.Errorf("README.md does not mention %s", address)
		}
		if !strings.Contains(address, ":"+shown[flag].def) || shown[flag].def == "" {
			t.Errorf("README.md says toolbus dev serves %s; --%s defaults to %q", address, flag, shown[flag].def)
		}
	}
}
