module github.com/msl-armory/pool

go 1.26
