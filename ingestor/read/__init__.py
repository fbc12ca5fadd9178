"""folder → documents → chunks: walking the folder, text out of each format, chunking, token counts."""
