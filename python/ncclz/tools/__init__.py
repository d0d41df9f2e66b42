"""Command-line tools shipped with ncclz (ncclz-bench, the codec demo, the compression policy)."""
