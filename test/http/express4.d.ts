// Express 4 is installed as the npm alias `express4`; its API is typed like Express 5's for these tests.
declare module "express4" {
  import express from "express";
  export default express;
}
