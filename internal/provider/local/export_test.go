package local

// RightsIn is rightsIn, for the tests of package local_test that play a
// sandbox's exec server.
var RightsIn = rightsIn

// Moved is how many commands' shells p moved into their exec groups
// because they had not moved themselves.
func Moved(p *Provider) int64 { return p.moved.Load() }
