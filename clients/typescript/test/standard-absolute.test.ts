// deepagents' standard cases with absolute paths (/workspace/NAME), as
// Modal's and Deno's wirings give them.
import { standardSuite } from "./standard.js";

standardSuite({ name: "absolute", resolvePath: (name) => `/workspace/${name}` });
