package admin_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/messages"
)

// A reason longer than the console's bound (docs/operations.md, "Bounds":
// 500 bytes) is cut there on a character's boundary, so that a reason
// written in any script still switches the tool, with the cut reason.
func TestLongReasonIsCutOnACharacter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hc := browser(t)
	csrf := b.login(t, hc)
	why := strings.Repeat("x", 499) + strings.Repeat("é", 100) // é is 2 bytes: byte 500 is inside one
	form := url.Values{"name": {"demo-echo"}, "enable": {"false"}, "reason": {why}, "csrf": {csrf}}
	resp, page := do(t, hc, "POST", b.url+"/tools/switch", form, map[string]string{"Origin": b.url})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("switch with a long reason: %s\n%s", resp.Status, page)
	}
	reply, err := b.client.ListTools(testenv.Context(t), messages.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range reply.Tools {
		if tool.Name != "demo-echo" {
			continue
		}
		if !tool.Disabled {
			t.Fatal("the switch with a long reason did not disable the tool")
		}
		stored, _, _ := strings.Cut(tool.Reason, " (by alice")
		if !utf8.ValidString(tool.Reason) || stored != strings.Repeat("x", 499) {
			t.Fatalf("the reason stored is %q, want the 499 bytes before the character that crosses 500", stored)
		}
		return
	}
	t.Fatal("demo-echo is not in the catalog")
}

// A form body larger than --max-request-bytes (64 KiB by default) is
// answered 400 and changes nothing.
func TestOversizedFormIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hc := browser(t)
	csrf := b.login(t, hc)
	form := url.Values{"name": {"demo-echo"}, "enable": {"false"}, "reason": {strings.Repeat("x", 65<<10)}, "csrf": {csrf}}
	resp, page := do(t, hc, "POST", b.url+"/tools/switch", form, map[string]string{"Origin": b.url})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "too large") {
		t.Fatalf("a 65 KiB form: %s %q, want 400 saying it is too large", resp.Status, page)
	}
	if b.toolDisabled(t, "demo-echo") {
		t.Fatal("an oversized form disabled the tool")
	}
}
