package natsutil

// Changes collects the names of the settings a reconcile changes.
type Changes []string

// Set applies a change and records its name when differ is true.
func (c *Changes) Set(name string, differ bool, apply func()) {
	if differ {
		*c = append(*c, name)
		apply()
	}
}
