package search

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTokenize(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"get_user_profile", []string{"get", "user", "profil"}},
		{"getUserProfile", []string{"get", "user", "profil"}},
		{"HTTPServer", []string{"http", "server"}},
		{"parseJSONResponse", []string{"pars", "json", "respons"}},
		{"list-open-issues", []string{"list", "open", "issu"}},
		{"math.factorial", []string{"math", "factori"}},
		{"sha256sum", []string{"sha", "256", "sum"}},
		{"coordinate_1", []string{"coordin", "1"}},
		{"IPAddress", []string{"ip", "address"}},
		{"base64Encode", []string{"base", "64", "encod"}},
		{"Find the files of the user's repositories", []string{"find", "file", "user", "repositori"}},
		{"don't stop", []string{"stop"}},
		{"Running RUNNING runs", []string{"run", "run", "run"}},
		{"Ünïcode Straße", []string{"ünïcode", "straße"}},
		{"天气预报", []string{"天气", "气预", "预报", "天", "气", "预", "报"}},
		{"查询天气 weather", []string{"查询", "询天", "天气", "查", "询", "天", "气", "weather"}},
		{"東", []string{"東"}},
		{"東京tower", []string{"東京", "東", "京", "tower"}},
		{"the of and", nil},
		{"\xff\xfeabc", []string{"abc"}},
		{"x", []string{"x"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got := Tokenize(tt.in)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Tokenize(%q) = %q; want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestTokenizeDropsOverlongWords(t *testing.T) {
	long := strings.Repeat("abc", maxTokenBytes/3+1)
	if got := Tokenize("keep " + long); !slices.Equal(got, []string{"keep"}) {
		t.Errorf("Tokenize kept an overlong word: %q", got)
	}
}

func TestPorterStem(t *testing.T) {
	// Examples from Porter's paper and its reference vocabulary.
	tests := map[string]string{
		"caresses": "caress", "ponies": "poni", "ties": "ti", "caress": "caress", "cats": "cat",
		"feed": "feed", "agreed": "agre", "plastered": "plaster", "bled": "bled", "motoring": "motor",
		"sing": "sing", "conflated": "conflat", "troubled": "troubl", "sized": "size", "hopping": "hop",
		"tanned": "tan", "falling": "fall", "hissing": "hiss", "fizzed": "fizz", "failing": "fail",
		"filing": "file", "happy": "happi", "sky": "sky", "relational": "relat", "conditional": "condit",
		"rational": "ration", "valenci": "valenc", "digitizer": "digit", "conformabli": "conform",
		"radicalli": "radic", "differentli": "differ", "vileli": "vile", "analogousli": "analog",
		"vietnamization": "vietnam", "predication": "predic", "operator": "oper", "feudalism": "feudal",
		"decisiveness": "decis", "hopefulness": "hope", "callousness": "callous", "formaliti": "formal",
		"sensitiviti": "sensit", "sensibiliti": "sensibl", "triplicate": "triplic", "formative": "form",
		"formalize": "formal", "electriciti": "electr", "electrical": "electr", "hopeful": "hope",
		"goodness": "good", "revival": "reviv", "allowance": "allow", "inference": "infer",
		"airliner": "airlin", "gyroscopic": "gyroscop", "adjustable": "adjust", "defensible": "defens",
		"irritant": "irrit", "replacement": "replac", "adjustment": "adjust", "dependent": "depend",
		"adoption": "adopt", "homologou": "homolog", "communism": "commun", "activate": "activ",
		"angulariti": "angular", "homologous": "homolog", "effective": "effect", "bowdlerize": "bowdler",
		"probate": "probat", "rate": "rate", "cease": "ceas", "controll": "control", "roll": "roll",
		"generalization": "gener", "oscillators": "oscil", "files": "file", "filed": "file",
	}
	for in, want := range tests {
		if got := porterStem(in); got != want {
			t.Errorf("porterStem(%q) = %q; want %q", in, got, want)
		}
	}
}

func FuzzTokenize(f *testing.F) {
	for _, s := range []string{"", "getUserProfile", "HTTPServer2Go", "天气预报 weather", "user's", "'''", "a\u0301b", "\xff", "ÀÉÎ-õü_09"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, tok := range Tokenize(s) {
			if tok == "" {
				t.Fatalf("Tokenize(%q) returned an empty token", s)
			}
			if !utf8.ValidString(tok) {
				t.Fatalf("Tokenize(%q) returned invalid UTF-8 %q", s, tok)
			}
			if len(tok) > maxTokenBytes {
				t.Fatalf("Tokenize(%q) returned a token of %d bytes", s, len(tok))
			}
		}
	})
}
