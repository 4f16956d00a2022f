package kvlease

// Helpers for the external tests: the layout's key encoding.
var (
	JobTokenForTest  = jobToken
	SlotTokenForTest = slotToken
)
