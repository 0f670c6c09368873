package mcpfront

import (
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// TokensEnv is the environment variable that may hold the tokens, as
// "TOKEN=AGENT" pairs separated by commas.
const TokensEnv = "TOOLBUS_MCP_TOKENS"

// LoadTokens reads a tokens file:
//
//	tokens:
//	  <token>: {agent: support}
func LoadTokens(path string) (map[string]Identity, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var file struct {
		Tokens map[string]Identity `yaml:"tokens"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(file.Tokens) == 0 {
		return nil, fmt.Errorf("%w: %s holds no tokens", ErrConfig, path)
	}
	return file.Tokens, nil
}

// ParseTokens reads tokens written as TokensEnv holds them.
func ParseTokens(s string) (map[string]Identity, error) {
	out := map[string]Identity{}
	for pair := range strings.SplitSeq(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		token, agent, ok := strings.Cut(pair, "=")
		if !ok || token == "" || agent == "" {
			return nil, fmt.Errorf("%w: %s: want TOKEN=AGENT pairs separated by commas", ErrConfig, TokensEnv)
		}
		out[token] = Identity{Agent: agent}
	}
	return out, nil
}
