/* A header with a C error, for the diagnostics of `include`. */
int fine(int x);
int broken(int x;
