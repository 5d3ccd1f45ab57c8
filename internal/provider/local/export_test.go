package local

// RightsIn is rightsIn, for the tests of package local_test that play a
// sandbox's exec server.
var RightsIn = rightsIn
