/** omega's tool set: bash, read, write, edit. */
export { bashTool } from './bash.ts'
export { editTool, readTool, writeTool } from './files.ts'
