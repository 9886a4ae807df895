package sample

// InTest is not part of the API.
func InTest() {}
