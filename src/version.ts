/** The service version, shown in the OpenAPI document and the MCP server info. */
export const VERSION = '0.1.0'
