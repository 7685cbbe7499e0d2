"""The run page in a browser: `swarmnode dashboard --web ADDR:PORT`.

- `page`: the status document as HTML (card, learners with their curves, the contributors board, peers by role
  and reachability, alerts), every text from the swarm escaped, no script;
- `svg`: the curves, drawn as inline SVG line charts;
- `server`: a read-only HTTP/1.1 server on asyncio with a token bucket per client (`/`, `/status.json`,
  `/schema.json`);
- `run`: the poll loop (the terminal dashboard's reads) that feeds the server.
"""
