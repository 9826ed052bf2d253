package types

// Page asks for one page of a list (GET .../versions, GET .../instances
// with ?limit=N&page_token=T): at most Limit items after the item Token
// names. The zero Page asks for the whole list.
type Page struct {
	Limit int    // 1..MaxPageLimit; DefaultPageLimit when only Token is set
	Token string // "" = from the start; else the next_page_token of the page before
}

// Page limits.
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
)
