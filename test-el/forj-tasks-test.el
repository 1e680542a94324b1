;;; forj-tasks-test.el --- The Tasks panel against the real worker  -*- lexical-binding: t; -*-

;;; Commentary:

;; The plan tools (`todo_write', `task') driven by a scripted model and
;; by the user in the Tasks panel, all through the real worker on a
;; temporary project: the panel follows each change, visits linked
;; lines, and what the user changes there is what the model's next
;; `list' sees.

;;; Code:

(require 'ert)
(require 'forj-tasks)
(require 'forj-chat-test)

(defmacro forj-tasks-test-with-delivery (&rest body)
  "Run BODY, checking that batches reach the Tasks panel by forj's own hook."
  (declare (indent 0) (debug t))
  `(progn
     (should (memq #'forj-tasks--after-batch forj-tools-after-batch-functions))
     ,@body))

(defun forj-tasks-test--call (name &rest args)
  "A tool-call block calling NAME with ARGS (a plist), id made from both."
  (forj-chat-test--block
   (json-serialize (list :id (format "%s-%s-%d" name (plist-get args :action) (random 100000))
                         :name name :args args))))

(defun forj-tasks-test--panel-text (panel)
  "The text of PANEL without properties."
  (with-current-buffer panel (buffer-substring-no-properties (point-min) (point-max))))

(defun forj-tasks-test--wait-panel (panel regexp)
  "Wait until PANEL shows a match for REGEXP; return non-nil if it does."
  (forj-test--wait-for (lambda () (string-match-p regexp (forj-tasks-test--panel-text panel))) 30))

(defun forj-tasks-test--calls-done ()
  "Wait until every call the panel made has its results; non-nil if so."
  (forj-test--wait-for
   (lambda () (not (cl-some (lambda (b) (string-prefix-p " *forj-tasks-calls*" (buffer-name b)))
                            (buffer-list))))
   30))

(defun forj-tasks-test--goto (panel text)
  "Put point in PANEL (and its window) on the item line holding TEXT."
  (with-current-buffer panel
    (goto-char (point-min))
    (should (search-forward text nil t))
    (beginning-of-line)
    (should (get-text-property (point) 'forj-tasks-item))
    (let ((window (get-buffer-window panel t)))
      (when window (set-window-point window (point))))))

(defun forj-tasks-test--close (panel)
  "Forget PANEL and its plan."
  (when (buffer-live-p panel)
    (with-current-buffer panel
      (remhash (forj-tasks--key forj-tasks--panel-root) forj-tasks--plans))
    (let ((window (get-buffer-window panel t)))
      (when (window-live-p window) (delete-window window)))
    (kill-buffer panel)))

(ert-deftest forj-test-tools-todo-write-model-plan-shows-in-the-panel ()
  "A scripted model makes a plan and works through it; the panel shows each change."
  (let (snapshots)
    (forj-tasks-test-with-delivery
      (forj-chat-test-with-session '(("src/lexer.py" . "a\nb\nc\n"))
          (list (list :text (concat
                             "Here is the plan.\n\n"
                             (forj-tasks-test--call "todo_write" :action "create" :title "Write the lexer"
                                                    :location (list :path "src/lexer.py" :line 2)
                                                    :labels ["parser"])
                             (forj-tasks-test--call "todo_write" :action "create" :title "Document it")
                             (forj-tasks-test--call "task" :action "create" :title "Parser"
                                                    :priority "high")
                             (forj-tasks-test--call "task" :action "add_subtask" :id "task-1"
                                                    :subtask (list :title "lexer"))
                             (forj-tasks-test--call "task" :action "add_subtask" :id "task-1"
                                                    :subtask (list :title "tables"))))
                (list :text (concat
                             "The lexer is done.\n\n"
                             (forj-tasks-test--call "todo_write" :action "complete" :id "todo-1")
                             (forj-tasks-test--call "task" :action "update_subtask" :id "task-1"
                                                    :subtask (list :id "s1" :done t))
                             (forj-tasks-test--call "task" :action "set_status" :id "task-1"
                                                    :status "in_progress")))
                (list :text "Half way there."))
        (let ((panel (forj-tasks root)))
          (unwind-protect
              (progn
                (should (forj-tasks-test--wait-panel panel "Todos (0)"))
                (advice-add 'forj-tasks-note-results :after
                            (lambda (&rest _) (push (forj-tasks-test--panel-text panel) snapshots))
                            '((name . forj-tasks-test-snapshot)))
                (forj-chat-test--say "Plan the parser and start.")
                (should (forj-chat-test--wait-idle 60))
                (should (string-match-p "Half way there\\." (buffer-string)))
                (setq snapshots (nreverse snapshots))
                ;; After the first batch: the whole plan, nothing done.
                (let ((first (cl-find-if (lambda (s) (string-match-p "Todos (2)" s)) snapshots)))
                  (should first)
                  (should (string-match-p " Open\n  ○ Write the lexer todo-1 src/lexer.py:2 #parser\n  ○ Document it todo-2\n" first))
                  (should (string-match-p "Tasks (1)\n Open\n  ○ Parser !high 0/2 task-1\n" first)))
                ;; After the second: the todo completed, the task under way.
                (let ((text (car (last snapshots))))
                  (should (string-match-p " Open\n  ○ Document it todo-2\n Completed\n  ✓ Write the lexer todo-1" text))
                  (should (string-match-p "Tasks (1)\n In progress\n  ◐ Parser !high 1/2 task-1\n" text)))
                (should (equal (car (last snapshots)) (forj-tasks-test--panel-text panel))))
            (advice-remove 'forj-tasks-note-results 'forj-tasks-test-snapshot)
            (forj-tasks-test--close panel)))))))

(ert-deftest forj-test-tools-todo-write-panel-edit-seen-by-the-model ()
  "The user completes a todo in the panel; the model's next list says so."
  (forj-tasks-test-with-delivery
    (forj-chat-test-with-session '(("a.txt" . "x\n"))
        (list (list :text (forj-tasks-test--call "todo_write" :action "create" :title "Check the build"))
              (list :text "Added.")
              (list :text (forj-tasks-test--call "todo_write" :action "list"))
              (list :text "Nothing is left."))
      (let ((panel (forj-tasks root))
            (chat (current-buffer)))
        (unwind-protect
            (progn
              (forj-chat-test--say "Add a todo.")
              (should (forj-chat-test--wait-idle 60))
              (should (forj-tasks-test--wait-panel panel "○ Check the build todo-1"))
              (forj-tasks-test--goto panel "Check the build")
              (with-current-buffer panel (forj-tasks-complete))
              (should (forj-tasks-test--wait-panel panel "Completed\n  ✓ Check the build todo-1"))
              (with-current-buffer chat
                (forj-chat-test--say "What is left?")
                (should (forj-chat-test--wait-idle 60))
                (should (string-match-p
                         "\"result\":{\"tasks\":\\[{\"id\":\"todo-1\",\"title\":\"Check the build\",\"status\":\"completed\"}\\],\"revision\":[0-9]+}"
                         ;; What the model read: the record, not the view.
                         (forj-session-transcript)))
                (should (string-match-p "Nothing is left\\." (buffer-string)))))
          (forj-tasks-test--close panel))))))

(ert-deftest forj-test-tools-task-panel-visits-linked-lines ()
  "RET on a todo's location or a task's link visits the file at its line."
  (forj-test-with-project '(("src/a.py" . "one\ntwo\nthree\nfour\n") ("b.md" . "b\n"))
    (make-directory (expand-file-name ".git" root))
    (let ((panel (forj-tasks root))
          done)
      (unwind-protect
          (progn
            (forj-tasks--call root
                              (list (list :name "todo_write"
                                          :args (list :action "create" :title "Fix three"
                                                      :location (list :path "src/a.py" :line 3)))
                                    (list :name "task"
                                          :args (list :action "create" :title "Linked"
                                                      :links (vector (list :path "src/a.py" :line 4)))))
                              (lambda (_) (setq done t)))
            (should (forj-test--wait-for (lambda () done) 30))
            (should (forj-tasks-test--wait-panel panel "Linked task-1 src/a.py:4"))
            (forj-tasks-test--goto panel "Fix three")
            (set-buffer panel)
            (forj-tasks-visit)
            (should (equal (buffer-file-name) (expand-file-name "src/a.py" root)))
            (should (= (line-number-at-pos) 3))
            (should (looking-at "three"))
            (forj-tasks-test--goto panel "Linked")
            (set-buffer panel)
            (forj-tasks-visit)
            (should (equal (buffer-file-name) (expand-file-name "src/a.py" root)))
            (should (= (line-number-at-pos) 4))
            ;; A linked file that went away since: said, not visited.
            (kill-buffer (find-buffer-visiting (expand-file-name "src/a.py" root)))
            (delete-file (expand-file-name "src/a.py" root))
            (forj-tasks-test--goto panel "Fix three")
            (should (equal (cadr (should-error (with-current-buffer panel (forj-tasks-visit))
                                               :type 'user-error))
                           "src/a.py no longer exists")))
        (forj-tasks-test--close panel)))))

(ert-deftest forj-test-tools-task-panel-keys-add-filter-reopen-delete ()
  "Items added, filtered, reopened and deleted from the panel, all through the worker."
  (forj-test-with-project '(("src/a.py" . "one\n"))
    (make-directory (expand-file-name ".git" root))
    (let ((panel (forj-tasks root)))
      (unwind-protect
          (with-current-buffer panel
            (should (forj-tasks-test--wait-panel panel "Todos (0)"))
            (forj-tasks-add-todo "Plain todo")
            (should (forj-tasks-test--wait-panel panel "Plain todo todo-1"))
            (forj-tasks-add-task "Big task" "critical")
            (should (forj-tasks-test--wait-panel panel "Big task !critical task-1"))
            ;; A title cannot hide text from the user.
            (forj-tasks-add-todo "Fine\u200b txt.exe")
            (should (forj-tasks-test--wait-panel panel "Fine⟨U\\+200B⟩ txt.exe todo-2"))
            (forj-tasks-test--goto panel "txt.exe")
            (cl-letf (((symbol-function 'yes-or-no-p) (lambda (_) t)))
              (forj-tasks-delete))
            (should (forj-test--wait-for
                     (lambda () (not (string-match-p "txt.exe" (forj-tasks-test--panel-text panel))))
                     30))
            (forj-tasks-add-task "Small task" nil)
            (should (forj-tasks-test--wait-panel panel "Small task task-2"))
            (forj-tasks-test--goto panel "Big task")
            (forj-tasks-set-status "blocked")
            (should (forj-tasks-test--wait-panel panel " Blocked\n  ⊘ Big task"))
            ;; The worker's rules hold in the panel too: blocked does not complete.
            (forj-tasks-test--goto panel "Big task")
            (let (said)
              (cl-letf (((symbol-function 'message)
                         (lambda (format &rest args) (push (apply #'format-message format args) said))))
                (forj-tasks-complete)
                (should (forj-test--wait-for (lambda () said) 30)))
              (should (equal said '("forj-tasks: Task task-1 is blocked; it cannot go to completed directly"))))
            (should (string-match-p "⊘ Big task" (forj-tasks-test--panel-text panel)))
            ;; Filters.
            (forj-tasks-filter-status "blocked")
            (should (string-match-p "Todos (1, 0 shown)\n\nTasks (2, 1 shown)\n Blocked\n  ⊘ Big task"
                                    (forj-tasks-test--panel-text panel)))
            (should (string-match-p "filter: status=blocked" (forj-tasks--header-line)))
            (forj-tasks-filter-clear)
            (forj-tasks-filter-path "src")
            (should (string-match-p "Todos (1, 0 shown)\n\nTasks (2, 0 shown)"
                                    (forj-tasks-test--panel-text panel)))
            (forj-tasks-filter-clear)
            ;; Complete, reopen, delete.
            (forj-tasks-test--goto panel "Plain todo")
            (forj-tasks-complete)
            (should (forj-tasks-test--wait-panel panel "✓ Plain todo"))
            (forj-tasks-test--goto panel "Plain todo")
            (forj-tasks-reopen)
            (should (forj-tasks-test--wait-panel panel "○ Plain todo"))
            (forj-tasks-test--goto panel "Small task")
            (cl-letf (((symbol-function 'yes-or-no-p) (lambda (_) t)))
              (forj-tasks-delete))
            (should (forj-test--wait-for
                     (lambda () (not (string-match-p "Small task" (forj-tasks-test--panel-text panel))))
                     30))
            ;; A fresh look at the worker's plan agrees with the panel.
            (let ((before (forj-tasks-test--panel-text panel)))
              (should (string-match-p "Todos (1)\n Open\n  ○ Plain todo todo-1\n\nTasks (1)\n Blocked\n  ⊘ Big task !critical task-1\n"
                                      before))
              (puthash (forj-tasks--key root) (list :todos nil :tasks nil) forj-tasks--plans)
              (forj-tasks--render)
              (should (equal (forj-tasks-test--panel-text panel) "Todos (0)\n\nTasks (0)\n\n"))
              (forj-tasks-refresh)
              (should (forj-tasks-test--calls-done))
              (should (equal (forj-tasks-test--panel-text panel) before))))
        (forj-tasks-test--close panel)))))

(ert-deftest forj-test-tools-task-export-from-the-panel-is-reviewed ()
  "Export from the panel opens the review; approved, the Markdown file is written."
  (forj-test-with-project '(("README.md" . "# x\n"))
    (make-directory (expand-file-name ".git" root))
    (let ((panel (forj-tasks root)))
      (unwind-protect
          (with-current-buffer panel
            (forj-tasks-add-task "Ship it" "high")
            (should (forj-tasks-test--wait-panel panel "Ship it !high task-1"))
            (forj-tasks-export :tasks "")
            (should (forj-test--wait-for (lambda () (get-buffer "*forj-review*")) 30))
            (with-current-buffer "*forj-review*"
              (should (string-match-p "Writes 1 task(s) to docs/roadmap.md" (buffer-string)))
              (should (string-match-p "+### task-1: Ship it" (buffer-string)))
              (forj-review-approve-all)
              (forj-review-commit))
            (let ((file (expand-file-name "docs/roadmap.md" root)))
              (should (forj-test--wait-for (lambda () (file-exists-p file)) 30))
              (should (string-match-p "## Open (1)\n\n### task-1: Ship it\n\n- Priority: high\n"
                                      (with-temp-buffer (insert-file-contents file)
                                                        (buffer-string))))
              (should (forj-tasks-test--calls-done))))
        (when (get-buffer "*forj-review*") (kill-buffer "*forj-review*"))
        (forj-tasks-test--close panel)))))

(ert-deftest forj-test-tools-task-result-summaries-are-one-line ()
  "Each plan change reads as one line; other tools and failures get none."
  (forj-test-with-project '(("a.txt" . "x\n"))
    (make-directory (expand-file-name ".git" root))
    (let* ((specs (list (list :name "todo_write" :args (list :action "create" :title "Write\nit"))
                        (list :name "todo_write" :args (list :action "complete" :id "todo-1"))
                        (list :name "todo_write" :args (list :action "list"))
                        (list :name "task" :args (list :action "create" :title "Big"))
                        (list :name "task" :args (list :action "add_subtask" :id "task-1"
                                                       :subtask (list :title "part")))
                        (list :name "task" :args (list :action "update_subtask" :id "task-1"
                                                       :subtask (list :id "s1" :done t)))
                        (list :name "task" :args (list :action "set_status" :id "task-1"
                                                       :status "blocked"))
                        (list :name "task" :args (list :action "add_note" :id "task-1" :note "n"))
                        ;; A batch holds at most 8 calls.
                        'split
                        (list :name "task" :args (list :action "delete" :id "task-1"))
                        (list :name "task" :args (list :action "reopen" :id "task-9"))
                        (list :name "read_file" :args (list :path "a.txt"))))
           (first (seq-take-while (lambda (s) (not (eq s 'split))) specs))
           (second (cdr (memq 'split specs)))
           results)
      (setq specs (append first second))
      (forj-tasks--call root first
                        (lambda (r)
                          (forj-tasks--call root second
                                            (lambda (more) (setq results (append r more))))))
      (should (forj-test--wait-for (lambda () results) 30))
      (should (equal (cl-mapcar (lambda (spec result)
                                  (forj-tasks-result-summary (plist-get spec :name)
                                                             (plist-get spec :args) result))
                                specs results)
                     '("Plan: + todo todo-1 “Write it”"
                       "Plan: ✓ todo todo-1 “Write it” completed"
                       "Plan: 1 todo (1 completed)"
                       "Plan: + task task-1 “Big”"
                       "Plan: task task-1 + subtask “part” (0/1)"
                       "Plan: task task-1 subtask s1 updated (1/1)"
                       "Plan: task task-1 “Big” → blocked"
                       "Plan: task task-1 note added"
                       "Plan: − task task-1 deleted"
                       nil
                       nil))))))

(ert-deftest forj-test-tools-todo-write-results-out-of-order ()
  "A list computed before a change but delivered after it does not undo the change."
  (let* ((root (file-name-as-directory (make-temp-file "forj-tasks-order-" t)))
         (key (forj-tasks--key root))
         (todo (list :id "todo-1" :title "a" :status "open")))
    (unwind-protect
        (progn
          (puthash key (list :todos nil :tasks nil) forj-tasks--plans)
          (forj-tasks-note-results root (list (list :name "todo_write" :ok t
                                                    :result (list :task todo :revision 1))))
          (forj-tasks-note-results root (list (list :name "todo_write" :ok t
                                                    :result (list :tasks [] :revision 0))))
          (should (equal (plist-get (gethash key forj-tasks--plans) :todos) (list todo)))
          ;; A list as new as the change agrees with it; a newer one replaces it.
          (forj-tasks-note-results root (list (list :name "todo_write" :ok t
                                                    :result (list :tasks (vector todo) :revision 1))))
          (should (equal (plist-get (gethash key forj-tasks--plans) :todos) (list todo)))
          (forj-tasks-note-results root (list (list :name "todo_write" :ok t
                                                    :result (list :tasks [] :revision 2))))
          (should (null (plist-get (gethash key forj-tasks--plans) :todos)))
          ;; A late change older than that list is left out too.
          (forj-tasks-note-results root (list (list :name "todo_write" :ok t
                                                    :result (list :task todo :revision 1))))
          (should (null (plist-get (gethash key forj-tasks--plans) :todos)))
          ;; Failed calls and other tools change nothing.
          (forj-tasks-note-results root (list (list :name "todo_write" :ok :false
                                                    :error (list :message "x"))
                                              (list :name "read_file" :ok t
                                                    :result (list :task todo :revision 9))))
          (should (null (plist-get (gethash key forj-tasks--plans) :todos))))
      (remhash key forj-tasks--plans)
      (delete-directory root t))))

(provide 'forj-tasks-test)
;;; forj-tasks-test.el ends here
