module github.com/metastore/metastore/bench

go 1.26.8

replace github.com/metastore/metastore => ../
