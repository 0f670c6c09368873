// Package editdistance measures how far apart two short strings are, to
// tell a misspelt name from an unknown one.
package editdistance

// Rows computes Levenshtein distances, in bytes, reusing its rows from one
// call to the next. The zero value is ready to use; it is not safe for
// concurrent use.
type Rows struct{ prev, cur []int }

// Between returns the Levenshtein distance between a and b, in bytes.
func (d *Rows) Between(a, b string) int {
	if cap(d.prev) < len(b)+1 {
		d.prev, d.cur = make([]int, len(b)+1), make([]int, len(b)+1)
	}
	prev, cur := d.prev[:len(b)+1], d.cur[:len(b)+1]
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
