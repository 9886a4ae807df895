module funclen
go 1.26
