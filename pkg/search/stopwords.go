package search

// stopWords are English function words that carry no meaning for finding a
// tool; queries are full of them ("can you please show me the ...").
var stopWords = map[string]struct{}{}

func init() {
	for _, w := range stopWordList {
		stopWords[w] = struct{}{}
	}
}

func isStopWord(w string) bool {
	_, ok := stopWords[w]
	return ok
}

var stopWordList = []string{
	"a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "as", "at",
	"be", "because", "been", "before", "being", "below", "between", "both", "but", "by",
	"can", "could",
	"did", "do", "does", "doing", "down", "during",
	"each",
	"few", "for", "from", "further",
	"had", "has", "have", "having", "he", "her", "here", "hers", "herself", "him", "himself", "his", "how",
	"i", "if", "in", "into", "is", "it", "its", "itself",
	"just",
	"me", "more", "most", "my", "myself",
	"no", "nor", "not", "now",
	"of", "off", "on", "once", "only", "or", "other", "our", "ours", "ourselves", "out", "over", "own",
	"please",
	"same", "she", "should", "so", "some", "such",
	"than", "that", "the", "their", "theirs", "them", "themselves", "then", "there", "these", "they",
	"this", "those", "through", "to", "too",
	"under", "until", "up",
	"very",
	"was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would",
	"you", "your", "yours", "yourself", "yourselves",
	// Contractions, as the tokenizer joins them.
	"im", "ive", "youre", "youve", "dont", "doesnt", "didnt", "isnt", "arent", "wasnt", "werent",
	"cant", "couldnt", "wont", "wouldnt", "shouldnt", "thats", "whats",
}

// usageStopWords are the words of asking, stemmed, that UsageTerms leaves
// out: every kind of request holds them, so as evidence they would tie
// tools to conversation rather than to what they do.
var usageStopWords = map[string]struct{}{}

func init() {
	for _, w := range []string{"want", "need", "help", "like", "look", "tell", "know", "let", "also",
		"hi", "hello", "thank", "thanks", "could", "would", "maybe", "something", "anything"} {
		for _, t := range Tokenize(w) {
			usageStopWords[t] = struct{}{}
		}
	}
}

func isUsageStopWord(t string) bool {
	_, ok := usageStopWords[t]
	return ok
}
