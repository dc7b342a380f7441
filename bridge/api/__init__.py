"""The request handlers and the one table (Routes) that says which handler answers which request."""
