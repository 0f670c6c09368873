package search

// stem reduces an English word to its stem with the Porter algorithm
// (M.F. Porter, "An algorithm for suffix stripping", 1980), so that "files",
// "filing" and "filed" meet. Words that are not lower-case ASCII letters, and
// words of one or two letters, are returned unchanged.
func stem(w string) string {
	if len(w) <= 2 {
		return w
	}
	for i := 0; i < len(w); i++ {
		if w[i] < 'a' || w[i] > 'z' {
			return w
		}
	}
	return porterStem(w)
}

func porterStem(w string) string {
	var buf [maxTokenBytes]byte
	p := porter{b: append(buf[:0], w...)}
	p.step1ab()
	if len(p.b) > 2 {
		p.step1c()
		p.step2()
		p.step3()
		p.step4()
		p.step5()
	}
	if string(p.b) == w {
		return w
	}
	return string(p.b)
}

// porter holds the word being stemmed; j marks the end of the stem that a
// matched suffix leaves (the Porter paper's "stem" before the suffix).
type porter struct {
	b []byte
	j int
}

func (p *porter) cons(i int) bool {
	switch p.b[i] {
	case 'a', 'e', 'i', 'o', 'u':
		return false
	case 'y':
		return i == 0 || !p.cons(i-1)
	}
	return true
}

// m counts the vowel-consonant sequences in b[:j].
func (p *porter) m() int {
	n, i := 0, 0
	for ; i < p.j && p.cons(i); i++ {
	}
	for i < p.j {
		for ; i < p.j && !p.cons(i); i++ {
		}
		if i >= p.j {
			break
		}
		n++
		for ; i < p.j && p.cons(i); i++ {
		}
	}
	return n
}

func (p *porter) vowelInStem() bool {
	for i := 0; i < p.j; i++ {
		if !p.cons(i) {
			return true
		}
	}
	return false
}

func (p *porter) doubleCons(i int) bool {
	return i >= 1 && p.b[i] == p.b[i-1] && p.cons(i)
}

// cvc reports whether b[i-2:i+1] is consonant-vowel-consonant with the last
// consonant not w, x or y.
func (p *porter) cvc(i int) bool {
	if i < 2 || !p.cons(i) || p.cons(i-1) || !p.cons(i-2) {
		return false
	}
	c := p.b[i]
	return c != 'w' && c != 'x' && c != 'y'
}

func (p *porter) ends(s string) bool {
	n := len(s)
	if n > len(p.b) || string(p.b[len(p.b)-n:]) != s {
		return false
	}
	p.j = len(p.b) - n
	return true
}

func (p *porter) setTo(s string) {
	p.b = append(p.b[:p.j], s...)
}

func (p *porter) replaceIfM0(s string) {
	if p.m() > 0 {
		p.setTo(s)
	}
}

func (p *porter) step1ab() {
	if p.b[len(p.b)-1] == 's' {
		switch {
		case p.ends("sses"):
			p.b = p.b[:len(p.b)-2]
		case p.ends("ies"):
			p.setTo("i")
		case len(p.b) >= 2 && p.b[len(p.b)-2] != 's':
			p.b = p.b[:len(p.b)-1]
		}
	}
	if p.ends("eed") {
		if p.m() > 0 {
			p.b = p.b[:len(p.b)-1]
		}
		return
	}
	if (p.ends("ed") || p.ends("ing")) && p.vowelInStem() {
		p.b = p.b[:p.j]
		switch {
		case p.ends("at"):
			p.setTo("ate")
		case p.ends("bl"):
			p.setTo("ble")
		case p.ends("iz"):
			p.setTo("ize")
		case p.doubleCons(len(p.b) - 1):
			if c := p.b[len(p.b)-1]; c != 'l' && c != 's' && c != 'z' {
				p.b = p.b[:len(p.b)-1]
			}
		default:
			p.j = len(p.b)
			if p.m() == 1 && p.cvc(len(p.b)-1) {
				p.b = append(p.b, 'e')
			}
		}
	}
}

func (p *porter) step1c() {
	if p.ends("y") && p.vowelInStem() {
		p.b[len(p.b)-1] = 'i'
	}
}

var step2Rules = [][2]string{
	{"ational", "ate"}, {"tional", "tion"}, {"enci", "ence"}, {"anci", "ance"}, {"izer", "ize"},
	{"bli", "ble"}, {"alli", "al"}, {"entli", "ent"}, {"eli", "e"}, {"ousli", "ous"},
	{"ization", "ize"}, {"ation", "ate"}, {"ator", "ate"}, {"alism", "al"}, {"iveness", "ive"},
	{"fulness", "ful"}, {"ousness", "ous"}, {"aliti", "al"}, {"iviti", "ive"}, {"biliti", "ble"},
	{"logi", "log"},
}

func (p *porter) step2() {
	for _, r := range step2Rules {
		if p.ends(r[0]) {
			p.replaceIfM0(r[1])
			return
		}
	}
}

var step3Rules = [][2]string{
	{"icate", "ic"}, {"ative", ""}, {"alize", "al"}, {"iciti", "ic"}, {"ical", "ic"}, {"ful", ""}, {"ness", ""},
}

func (p *porter) step3() {
	for _, r := range step3Rules {
		if p.ends(r[0]) {
			p.replaceIfM0(r[1])
			return
		}
	}
}

var step4Suffixes = []string{
	"al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent",
	"ion", "ou", "ism", "ate", "iti", "ous", "ive", "ize",
}

func (p *porter) step4() {
	for _, s := range step4Suffixes {
		if !p.ends(s) {
			continue
		}
		if s == "ion" && (p.j == 0 || (p.b[p.j-1] != 's' && p.b[p.j-1] != 't')) {
			return
		}
		if p.m() > 1 {
			p.b = p.b[:p.j]
		}
		return
	}
}

func (p *porter) step5() {
	p.j = len(p.b)
	if p.b[len(p.b)-1] == 'e' {
		p.j = len(p.b) - 1
		if a := p.m(); a > 1 || (a == 1 && !p.cvc(len(p.b)-2)) {
			p.b = p.b[:len(p.b)-1]
		}
	}
	p.j = len(p.b)
	if p.b[len(p.b)-1] == 'l' && p.doubleCons(len(p.b)-1) && p.m() > 1 {
		p.b = p.b[:len(p.b)-1]
	}
}
