package schema

// ColumnType exposes columnType to the engine tests, which compare it with the server's.
var ColumnType = columnType
